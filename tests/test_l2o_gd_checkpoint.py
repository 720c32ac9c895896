"""l2o_gd's checkpoints beyond its examples: a learner run with diagnostics and trajectories at every
cadence (its running maxima, alpha_0 and the 1-2-5 trajectory points go in the checkpoint) resumed and
grown across them; a GD run whose one checkpoint is its result; and batches whose members resume apart."""

from __future__ import annotations

import threading
from typing import Any

from runner.grid.identity import validate_params
from tasks import Result, RunContext, get_task
from tasks.status import PREEMPTED
from tests.checkpoint_checks import check_batched_resume, grows_exactly, resumes_exactly
from tests.test_checkpoint_conformance import assert_same_result, collecting, run
from tests.test_l2o_gd_batch import assert_same

L2O: dict[str, Any] = {"algo": "l2o", "d": 6, "b": 4, "n_problems": 2, "n1": 6, "n2": 12, "T": 6, "e": 5.0}
L2O |= {"lr": 1e-3, "epochs": 7, "log_every": 3, "diag_every": 2, "best_c": False}


def test_learner_with_diagnostics_resumes_and_grows() -> None:
    resumes_exactly("l2o_gd", L2O, picks=4)
    grows_exactly("l2o_gd", L2O, short=4)  # the short run's last epoch is a diagnostic and logged one
    grows_exactly("l2o_gd", {**L2O, "diag_every": 0, "traj_every": 0}, short=3)  # 1-2-5 points: 3 is none


GD: dict[str, Any] = {"algo": "gd", "d": 8, "b": 5, "n_problems": 2, "T": 12, "c": 1.2, "log_every": 5}


def test_gd_run_saves_once_and_resumes_from_its_result() -> None:
    alone = run("l2o_gd", GD)
    saved, save = collecting()
    preempt = threading.Event()
    preempt.set()
    assert run("l2o_gd", GD, checkpointer=save, preempt=preempt).status == PREEMPTED
    assert [c.step for c in saved] == [alone.n_steps] and not saved[0].tensors
    assert_same_result(run("l2o_gd", GD, resume=saved[0]), alone, "resumed")
    task = get_task("l2o_gd")
    ps = [validate_params(task, {**GD, "seed": s}) for s in range(3)]
    batch = task.run_batch(ps, [RunContext(), RunContext(resume=saved[0]), RunContext()])
    for i, got in enumerate(batch):
        want = alone if i == 1 else task.run(ps[i], RunContext())
        assert_same_result(got, want, f"member {i}")


def _same(want: Result, got: Result, label: str) -> None:
    try:
        assert_same(got, want)
    except AssertionError as err:
        raise AssertionError(f"{label}: {err}") from err


def test_batch_members_resume_apart() -> None:
    configs = [{**L2O, "seed": s, "lr": 1e-3 * (s + 1)} for s in range(3)]
    check_batched_resume("l2o_gd", configs, _same)
