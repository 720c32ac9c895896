"""Work starts before Ray is up (runner.execute.warm): cells run in process while the embedded Ray starts.

These tests replace the background start with a stand-in whose moment of readiness they choose, so they
start no Ray; the handover to a real Ray pool is in tests/test_ray_executor.py (it shares that module's Ray).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow.dataset as ds

from runner import ResultStore, run_grid
from runner.api import make_executor
from runner.execute.ray_pool import RayExecutor
from runner.execute.warm import WarmStartExecutor


class ReadyAfter(threading.Event):
    """Set once `is_set` has been asked `after` times (never, with None): `execute` asks once as it
    begins and the in-process phase before each pull from the source, so `after - 1` items run in process."""

    def __init__(self, after: int | None) -> None:
        super().__init__()
        self.after, self.asked = after, 0

    def is_set(self) -> bool:
        self.asked += 1
        return self.after is not None and self.asked > self.after


class StandInStart:
    """A start under way that becomes ready when `ready` says so; waiting for it before then fails the test."""

    def __init__(self, then: Callable[[], None], after: int | None) -> None:
        self.then = then
        self.ready: threading.Event = ReadyAfter(after)
        self.warmed = False

    def check(self) -> None:
        pass

    def wait(self) -> None:
        assert self.ready.is_set(), "waited for Ray although the in-process phase could go on"
        if not self.warmed:
            self.then()
            self.warmed = True


def warm_executor(after: int | None, pool: RayExecutor | None = None) -> tuple[WarmStartExecutor, list[StandInStart]]:
    starts: list[StandInStart] = []

    def starter(then: Callable[[], None]) -> StandInStart:
        starts.append(StandInStart(then, after))
        return starts[-1]

    return WarmStartExecutor(pool or RayExecutor(), starter=starter), starts


def stored_ids(root: Path, task: str) -> list[str]:
    """Every runs/ row's run id, read from the part files as written (no newest-row rule)."""
    return ds.dataset(root / "runs" / f"task={task}").to_table(columns=["run_id"])["run_id"].to_pylist()


def test_auto_on_the_embedded_ray_is_the_warm_start_and_ray_elsewhere() -> None:
    assert isinstance(make_executor("auto"), WarmStartExecutor)
    assert isinstance(make_executor("ray"), RayExecutor)
    for option in ({"address": "auto"}, {"timeout_s": 5.0}, {"gpus_per_worker": 0.5}):
        assert isinstance(make_executor("auto", **option), RayExecutor), option


def test_a_grid_that_ends_while_ray_starts_never_waits_for_it(tmp_path: Path) -> None:
    executor, starts = warm_executor(after=None)  # Ray never comes up
    grid = {"name": "quick", "blocks": [{"task": "faulty", "product": {"x": [1.0, 2.0, 3.0]}}]}
    report = run_grid(grid, tmp_path, executor, progress=False)
    assert (report.executed, report.counts["ok"], executor.ran_locally) == (3, 3, 3)
    assert len(starts) == 1 and not starts[0].warmed and executor.pool.actors == []
    assert sorted(ResultStore(tmp_path).read_runs("faulty")["square"].to_pylist()) == [1.0, 4.0, 9.0]
    assert executor._abandoned  # closed before Ray was up: the start stops what it makes, nobody waits


def test_a_failing_cell_run_while_ray_starts_is_a_recorded_failure(tmp_path: Path) -> None:
    executor, _ = warm_executor(after=None)
    grid = {"name": "fails", "blocks": [{"task": "faulty", "product": {"x": [1.0, 2.0], "fail": [False, True]}}]}
    report = run_grid(grid, tmp_path, executor, progress=False)
    assert (report.counts["ok"], report.counts["failed"], executor.ran_locally) == (2, 2, 4)
    runs = ResultStore(tmp_path).read_runs("faulty").to_pandas().set_index("x")
    failed = runs[runs["status"] == "failed"]
    assert sorted(failed.index) == [1.0, 2.0] and failed["fail"].all()
    for x, error in failed["error"].items():
        assert error.startswith(f"RuntimeError: asked to fail with x={x}") and "Traceback" in error
    # failed runs are not done: the same command runs them again (here: in process again), never the ok ones
    rerun, _ = warm_executor(after=None)
    again = run_grid(grid, tmp_path, rerun, progress=False, retry_failed=True)
    assert (again.executed, again.already_done, rerun.ran_locally) == (2, 2, 2)


def test_a_study_with_a_pruner_prunes_in_process_while_ray_starts(tmp_path: Path) -> None:
    from runner.tune.driver import tune
    from tests.test_tune import prune_study

    raw = prune_study(tmp_path, "warm_prune", n_iters=400)
    executor, starts = warm_executor(after=None)  # Ray never comes up: the study must not wait for it
    (report,) = tune(raw, tmp_path, executor, progress=False)
    assert report.states == {"COMPLETE": 2, "PRUNED": 1} and executor.ran_locally == 3
    executor.close()  # the caller's executor: the study leaves it open
    assert not starts[0].warmed and executor._abandoned
    runs = ResultStore(tmp_path).read_runs("least_squares", ["status", "n_steps", "lr"]).to_pylist()
    (bad,) = [r for r in runs if r["lr"] == 0.06]
    # the direct channel stops the run at the first step the pruner judges, as the local executor's does
    assert bad["status"] == "pruned" and 20 <= bad["n_steps"] <= 30
