"""Checkpoints in batched runs (tasks.base.Checkpointable with BatchableTask): a batch whose members resume
from different steps, and save as they go, gives every member its run alone, bit for bit; a state saved in
a batch resumes alone to the same result (deep_linear's batch books, BatchTracker, save a member in the
form a Tracker keeps it), and a state saved alone resumes in a batch."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from runner.grid.identity import validate_params
from tasks import Checkpoint, Result, RunContext, get_task
from tasks.deep_linear import batched
from tests.test_checkpoint_conformance import assert_same_result, roundtrip

# configs of one batch key each: seeds, steps and budgets vary per member
MEMBERS: dict[str, list[dict[str, Any]]] = {
    "least_squares": [
        {"d_in": 8, "d_out": 2, "m": 30, "n_iters": n, "lr": lr, "seed": s, "log_every": e}
        for n, lr, s, e in [(40, 0.1, 0, 1), (60, 0.05, 1, 7), (25, 0.1, 2, 3), (60, 0.08, 3, 1)]
    ],
    "deep_linear": [
        {"algo": "bcgd", "d_in": 12, "d_out": 3, "m": 40, "L": 4, "n_iters": n, "seed": s, "log_every": e}
        for n, s, e in [(40, 1, 1), (60, 2, 5), (24, 3, 3), (60, 4, 1)]
    ],
    "deep_linear_gd": [
        {"algo": "gd", "d_in": 12, "d_out": 3, "m": 40, "L": 3, "lr": lr, "n_iters": n, "seed": s}
        for n, lr, s in [(40, 0.05, 1), (30, 0.04, 2), (50, 0.05, 3)]
    ],
}

BatchRun = Callable[[str, Sequence[Any], Sequence[RunContext]], list[Result]]


def task_batch(name: str, ps: Sequence[Any], ctxs: Sequence[RunContext]) -> list[Result]:
    return get_task(name).run_batch(ps, ctxs)


def batch_tracker(name: str, ps: Sequence[Any], ctxs: Sequence[RunContext]) -> list[Result]:
    """deep_linear's batch with the array books (BatchTracker) whatever its size."""
    return batched.run_batch(ps, ctxs, get_task(name).summary_fields, per_member=False)


RUNS: list[tuple[str, str, BatchRun]] = [
    ("least_squares", "least_squares", task_batch),
    ("deep_linear", "deep_linear", task_batch),
    ("deep_linear", "deep_linear", batch_tracker),
    ("deep_linear", "deep_linear_gd", task_batch),
    ("deep_linear", "deep_linear_gd", batch_tracker),
]
IDS = [f"{members}-{run.__name__}" for _, members, run in RUNS]


def saved_alone(name: str, p: Any) -> tuple[Result, list[Checkpoint]]:
    saved: list[Checkpoint] = []
    task = get_task(name)
    alone = task.run(p, RunContext())
    task.run(p, RunContext(checkpointer=lambda c: saved.append(roundtrip(c)), checkpoint_every=0.0))
    return alone, saved


@pytest.mark.parametrize(("name", "members", "batch"), RUNS, ids=IDS)
def test_members_resuming_at_different_steps_equal_their_runs_alone(name: str, members: str, batch: BatchRun) -> None:
    task = get_task(name)
    ps = [validate_params(task, raw) for raw in MEMBERS[members]]
    alone, saved = zip(*(saved_alone(name, p) for p in ps), strict=True)
    rng = random.Random(members)
    # member 0 starts at step 0; the others from a random checkpoint of their own
    resumes = [None, *(rng.choice(s) for s in saved[1:])]
    assert len({r.step if r else 0 for r in resumes}) > 1, "the members must resume at different steps"
    got: list[list[Checkpoint]] = [[] for _ in ps]
    ctxs = [
        RunContext(resume=r, checkpointer=lambda c, i=i: got[i].append(roundtrip(c)), checkpoint_every=0.0)
        for i, r in enumerate(resumes)
    ]
    for i, (r, a) in enumerate(zip(batch(name, ps, ctxs), alone, strict=True)):
        assert_same_result(r, a, f"member {i} resumed from {resumes[i].step if resumes[i] else 0}")
    # what the batch saved resumes alone to the same result, and what was saved alone resumes in a batch
    for i, p in enumerate(ps):
        assert got[i], f"member {i} saved nothing"
        ckpt = rng.choice(got[i])
        assert_same_result(
            task.run(p, RunContext(resume=ckpt)), alone[i], f"member {i} saved in a batch at {ckpt.step}"
        )
    again = batch(name, ps, [RunContext(resume=rng.choice(s)) for s in saved])
    for i, (r, a) in enumerate(zip(again, alone, strict=True)):
        assert_same_result(r, a, f"member {i} saved alone, resumed in a batch")
