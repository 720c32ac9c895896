"""`convgrid tune` on an embedded Ray (loopback, 2 CPUs): a study that starts in process while Ray starts
moves to Ray with its pruner, whose intermediate values then travel through the pruning channel actor
and whose verdict stops the run; a worker killed mid-trial loses nothing."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from runner import RayExecutor, ResultStore
from runner.store.trials import read_trials
from runner.tune.driver import tune
from tests.faulty_inputs import faulty_study
from tests.options import opts
from tests.test_tune import prune_study

pytestmark = [pytest.mark.ray, pytest.mark.faults]


def test_a_study_moves_to_ray_with_its_pruner_when_ray_is_up(tmp_path: Path, ray_local: object) -> None:
    from tests.test_warm_start import warm_executor

    raw = prune_study(tmp_path, "warm_ray_prune", n_iters=3000, log_every=5)
    # the first trial runs in process, then the stand-in start says Ray is up: the others, the pruned one
    # among them, run on the module's Ray and report through the pool's channel actor
    executor, starts = warm_executor(after=2, pool=RayExecutor(workers=1))
    executor.start()  # the start begins with the study (a study this short would not start Ray)
    (report,) = tune(raw, tmp_path, opts(), executor=executor)
    assert report.states == {"COMPLETE": 2, "PRUNED": 1}
    assert (executor.ran_locally, starts[0].warmed, executor.pool.chunks_submitted) == (1, True, 2)
    runs = ResultStore(tmp_path).read_runs("least_squares", ["status", "n_steps", "lr"]).to_pylist()
    (bad,) = [r for r in runs if r["lr"] == 0.06]
    # The verdict reaches the worker with its next reports (asynchronous), long before 3000 steps.
    assert bad["status"] == "pruned" and 20 <= bad["n_steps"] < 1500, bad


def test_ray_study_with_a_worker_killed_mid_batch(tmp_path: Path, ray_local: object) -> None:
    executor = RayExecutor(workers=2)
    victim = executor.worker_pids()[0]
    killer = threading.Timer(1.0, os.kill, (victim, signal.SIGKILL))  # the study takes >= 2.4 s
    study = faulty_study("killed_worker", 12, 2, sleep_s=0.4)
    killer.start()
    try:
        (report,) = tune(study, tmp_path, opts(), executor=executor)
    finally:
        killer.cancel()
        executor.close()
    assert executor.chunks_resubmitted >= 1  # a run really was lost with its worker, and run again
    assert report.states == {"COMPLETE": 12}
    trials = read_trials(ResultStore(tmp_path), "killed_worker").to_pylist()
    assert [t["state"] for t in trials] == ["COMPLETE"] * 12
