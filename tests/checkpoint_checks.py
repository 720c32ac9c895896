"""Checks of a learner's checkpoints beyond its examples (tests/test_checkpoint_conformance.py): one config
resumed at random steps and grown, and batches whose members resume from different steps, save, and are
preempted together. Shared by the learners' checkpoint tests."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

from runner.grid.identity import validate_params
from tasks import Checkpoint, Result, RunContext, get_task
from tasks.base import is_batchable
from tasks.status import PREEMPTED
from tests.batch_equality import assert_same_result as assert_close_result
from tests.test_checkpoint_conformance import assert_same_result, collecting, roundtrip, run


def resumes_exactly(name: str, raw: dict[str, Any], picks: int = 3) -> list[Checkpoint]:
    """`raw` saved after every step changes nothing, and resumed from `picks` random steps gives the run
    alone bit for bit. Returns the checkpoints."""
    alone = run(name, raw)
    saved, save = collecting()
    assert_same_result(run(name, raw, checkpointer=save, checkpoint_every=0.0), alone, "saving every step")
    assert len(saved) > 1, "a run of one step says nothing of resuming"
    for ckpt in random.Random(repr(raw)).sample(saved, min(picks, len(saved))):
        assert_same_result(run(name, raw, resume=ckpt), alone, f"resumed from step {ckpt.step}")
    return saved


def grows_exactly(name: str, raw: dict[str, Any], short: int) -> None:
    """The final state of `raw` with its budget cut to `short`, grown back, gives the long run bit for bit."""
    task = get_task(name)
    budget = task.growable_budget(validate_params(task, raw))
    assert budget is not None, f"{raw} cannot grow"
    saved, save = collecting()
    run(name, {**raw, budget: short}, checkpointer=save, keep_final=True)
    assert saved, "the short run kept no final state"
    assert_same_result(run(name, raw, resume=saved[-1]), run(name, raw), f"grown from {budget}={short}")


def _batch(name: str, ps: Sequence[Any], ctxs: Sequence[RunContext]) -> list[Result]:
    task = get_task(name)
    assert is_batchable(task)
    return task.run_batch(ps, ctxs)


def check_batched_resume(
    name: str, configs: Sequence[dict[str, Any]], same: Callable[[Result, Result, str], None] | None = None
) -> None:
    """A batch of `configs` (one batch key) where each member resumes from its own checkpoint at a random
    step (the first member fresh) gives each member's run alone; so do the members' checkpoints taken
    inside a batch, each resumed alone; and a batch preempted at a random step stops every member with
    status preempted and resumes, as a batch, to the batch uninterrupted. Batched against single runs the
    equality is the batch contract's: `same(want, got, label)`, by default tests/batch_equality.py's (float64 to
    1e-12 relative)."""
    check = same or (lambda want, got, label: assert_close_result(want, got, label=label))
    task = get_task(name)
    ps = [validate_params(task, raw) for raw in configs]
    alone = [task.run(p, RunContext()) for p in ps]
    rng = random.Random(f"batched-{name}")

    # Each member resumes from a checkpoint of its own single run, at its own step.
    # Member 1 from its first (ldminv: step 0, in one batch with the fresh member 0).
    resumes: list[Checkpoint | None] = [None]
    for i, p in enumerate(ps[1:], start=1):
        saved, save = collecting()
        task.run(p, RunContext(checkpointer=save, checkpoint_every=0.0))
        used = {0, *(c.step for c in resumes if c is not None)}
        resumes.append(saved[0] if i == 1 else rng.choice([c for c in saved if c.step not in used] or saved))
    assert len({0 if c is None else c.step for c in resumes}) > 1, "the members must resume at different steps"
    got = _batch(name, ps, [RunContext(resume=c) for c in resumes])
    for i, (g, a) in enumerate(zip(got, alone, strict=True)):
        check(a, g, f"member {i} resumed at {resumes[i] and resumes[i].step}")  # type: ignore[union-attr]

    # Checkpoints saved inside a batch resume alone to the single run.
    pairs = [collecting() for _ in ps]
    inside = [saved for saved, _ in pairs]
    whole = _batch(name, ps, [RunContext(checkpointer=save, checkpoint_every=0.0) for _, save in pairs])
    for i, (p, saved) in enumerate(zip(ps, inside, strict=True)):
        check(alone[i], whole[i], f"member {i} saving every step")
        assert saved, f"member {i} saved nothing"
        ckpt = rng.choice(saved)
        check(alone[i], task.run(p, RunContext(resume=ckpt)), f"member {i} from its batch's step {ckpt.step}")

    # A preempted batch: every member stops at the step it saved last, and the batch resumes.
    steps = sorted({c.step for saved in inside for c in saved})
    at = rng.choice(steps[: max(1, len(steps) // 2)])
    preempt = threading.Event()
    last: list[Checkpoint | None] = [None] * len(ps)

    def saver(i: int) -> Any:
        def save(c: Checkpoint) -> None:
            last[i] = roundtrip(c)
            if c.step >= at:
                preempt.set()

        return save

    stopped = _batch(
        name, ps, [RunContext(checkpointer=saver(i), checkpoint_every=0.0, preempt=preempt) for i in range(len(ps))]
    )
    assert any(r.status == PREEMPTED for r in stopped), f"no member stopped on preemption at step {at}"
    resumed = _batch(
        name,
        ps,
        [RunContext(resume=c) if s.status == PREEMPTED else RunContext() for c, s in zip(last, stopped, strict=True)],
    )
    for i, (r, w) in enumerate(zip(resumed, whole, strict=True)):
        check(w, r, f"member {i} after the batch's preemption at step {at}")
