"""Checkpoints, as every learner must honour them (tasks.base.Checkpointable), in process.

For each example of each learner: a run that saves after every step gives what the run alone gives; a
run resumed from a checkpoint taken at a random step (passed through the store's own encoding: tensors
and plain data, loaded with `weights_only=True`, which executes no code) gives the run alone, bit for bit;
a run preempted at a random step stops with status `preempted` and its saved state resumes to the run
alone; and where the learner says its budget can grow, a shorter run's final state grown to the full
budget gives the run of the full budget from scratch.
"""

from __future__ import annotations

import io
import math
import random
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from runner.grid.identity import validate_params
from tasks import Checkpoint, Result, RunContext, get_task
from tasks.base import is_checkpointable
from tasks.registry import builtin_task_names
from tasks.status import PREEMPTED

TASKS = builtin_task_names()
CHECKPOINTABLE = [n for n in TASKS if is_checkpointable(get_task(n))]
EXAMPLES = [(n, i) for n in CHECKPOINTABLE for i in range(len(get_task(n).examples))]
IDS = [f"{n}-{i}" for n, i in EXAMPLES]


def roundtrip(ckpt: Checkpoint) -> Checkpoint:
    """The checkpoint as the store gives it back: torch.save, then torch.load(weights_only=True)."""
    buf = io.BytesIO()
    torch.save({"step": ckpt.step, "tensors": ckpt.tensors, "state": ckpt.state}, buf)
    buf.seek(0)
    raw = torch.load(buf, weights_only=True)
    return Checkpoint(step=raw["step"], tensors=raw["tensors"], state=raw["state"], final=ckpt.final)


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def assert_same_result(got: Result, want: Result, what: str) -> None:
    assert got.status == want.status, what
    assert got.n_steps == want.n_steps, what
    assert got.diverged_step == want.diverged_step, what
    assert same_value(float(got.flops), float(want.flops)), what
    assert got.summary.keys() == want.summary.keys(), what
    for key in want.summary:
        assert same_value(got.summary[key], want.summary[key]), f"{what}: summary {key}"
    assert got.curve.keys() == want.curve.keys(), what
    for key in want.curve:
        a, b = list(got.curve[key]), list(want.curve[key])
        assert len(a) == len(b), f"{what}: curve {key} has {len(a)} rows, not {len(b)}"
        assert all(same_value(x, y) for x, y in zip(a, b, strict=True)), f"{what}: curve {key}"


def run(name: str, raw: dict[str, Any], **ctx: Any) -> Result:
    task = get_task(name)
    return task.run(validate_params(task, raw), RunContext(**ctx))


def collecting() -> tuple[list[Checkpoint], Callable[[Checkpoint], None]]:
    saved: list[Checkpoint] = []
    return saved, lambda c: saved.append(roundtrip(c))


def example(name: str, i: int) -> dict[str, Any]:
    return dict(get_task(name).examples[i])


def test_every_shipped_learner_declares_checkpoints() -> None:
    assert set(CHECKPOINTABLE) == set(TASKS), f"without checkpoints: {sorted(set(TASKS) - set(CHECKPOINTABLE))}"


@pytest.mark.parametrize(("name", "i"), EXAMPLES, ids=IDS)
def test_resumed_at_random_steps_equals_the_run_alone(name: str, i: int) -> None:
    raw = example(name, i)
    alone = run(name, raw)
    saved, save = collecting()
    assert_same_result(run(name, raw, checkpointer=save, checkpoint_every=0.0), alone, "saving every step")
    assert saved, "a run that saves after every step saved nothing"
    steps = [c.step for c in saved]
    assert steps == sorted(steps) and len(set(steps)) == len(steps), "one checkpoint per step, in order"
    rng = random.Random(f"{name}-{i}")
    for ckpt in rng.sample(saved, min(3, len(saved))):
        assert_same_result(run(name, raw, resume=ckpt), alone, f"resumed from step {ckpt.step}")


@pytest.mark.parametrize(("name", "i"), EXAMPLES, ids=IDS)
def test_preempted_run_saves_stops_and_resumes(name: str, i: int) -> None:
    raw = example(name, i)
    alone = run(name, raw)
    saved, _ = collecting()
    steps: list[int] = []
    run(name, raw, checkpointer=lambda c: steps.append(c.step), checkpoint_every=0.0)
    if len(steps) < 2:
        pytest.skip("a run of one step cannot be preempted in its middle")
    at = random.Random(f"preempt-{name}-{i}").choice(steps[:-1])
    preempt = threading.Event()

    def save(c: Checkpoint) -> None:
        saved.append(roundtrip(c))
        if c.step >= at:
            preempt.set()  # as the runner's SIGTERM handler would, while the run is going

    stopped = run(name, raw, checkpointer=save, checkpoint_every=0.0, preempt=preempt)
    assert stopped.status == PREEMPTED
    assert saved[-1].step == at, "the run stops at the step whose state it saved"
    assert_same_result(run(name, raw, resume=saved[-1]), alone, f"resumed after preemption at step {at}")


@pytest.mark.parametrize(("name", "i"), EXAMPLES, ids=IDS)
def test_grown_budget_equals_the_long_run_from_scratch(name: str, i: int) -> None:
    task = get_task(name)
    raw = example(name, i)
    budget = task.growable_budget(validate_params(task, raw))
    if budget is None:
        pytest.skip("this config's trajectory depends on its budget")
    params = validate_params(task, raw).model_dump()
    full = int(params[budget])
    if full < 2:
        pytest.skip("a budget of one step has no shorter run")
    short = {**raw, budget: max(1, full // 3)}
    saved, save = collecting()
    run(name, short, checkpointer=save, keep_final=True)
    assert not saved or saved[-1].final, "the run's last save is marked final: ctx.checkpoint(..., last=True)"
    assert not any(c.final for c in saved[:-1]), "only the last save is final"
    if not saved:
        pytest.skip("the shorter run stopped before its budget (tolerance or divergence): nothing to grow")
    assert_same_result(run(name, raw, resume=saved[-1]), run(name, raw), f"grown from {budget}={full // 3}")


@pytest.mark.parametrize(("name", "i"), EXAMPLES, ids=IDS)
def test_resumed_from_its_final_state_equals_the_run_alone(name: str, i: int) -> None:
    """The state a run keeps for budget growth (`keep_final`, its last step's save), resumed by the same
    config, as after a worker lost between that save and the run's commit."""
    raw = example(name, i)
    saved, save = collecting()
    alone = run(name, raw, checkpointer=save, keep_final=True)
    if not saved:
        pytest.skip("the run stopped before its budget (tolerance or divergence): no final state")
    assert len(saved) == 1, "without a cadence only the last step is saved"
    assert_same_result(run(name, raw, resume=saved[0]), alone, f"resumed from its final state at {saved[0].step}")
