"""Work starts before Ray is up (runner.execute.warm): cells run in process while the embedded Ray starts.

These tests replace the background start with a stand-in whose moment of readiness they choose, so they
start no Ray; the handover to a real Ray pool is in tests/test_ray_executor.py (it shares that module's Ray).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import cast

import pyarrow.dataset as ds
import pytest

from runner import ResultStore, run_grid
from runner.execute.auto import make_executor
from runner.execute.base import WorkItem
from runner.execute.options import ExecutionOptions
from runner.execute.ray_pool import RayExecutor
from runner.execute.warm import WarmStartExecutor
from runner.store.records import RunRecord
from tests.options import opts


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
    assert isinstance(make_executor(ExecutionOptions()), WarmStartExecutor)
    assert isinstance(make_executor(ExecutionOptions(executor="ray")), RayExecutor)
    for option in ({"address": "auto"}, {"timeout_s": 5.0}, {"gpus_per_worker": 0.5}):
        assert isinstance(make_executor(ExecutionOptions(**option)), RayExecutor), option


def test_a_grid_that_ends_while_ray_starts_never_waits_for_it(tmp_path: Path) -> None:
    executor, starts = warm_executor(after=None)  # Ray never comes up
    grid = {"name": "quick", "blocks": [{"task": "faulty", "product": {"x": [1.0, 2.0, 3.0]}}]}
    report = run_grid(grid, tmp_path, opts(), executor=executor)
    assert (report.executed, report.counts["ok"], executor.ran_locally) == (3, 3, 3)
    assert len(starts) == 1 and not starts[0].warmed and executor.pool.actors == []
    assert sorted(ResultStore(tmp_path).read_runs("faulty")["square"].to_pylist()) == [1.0, 4.0, 9.0]
    executor.close()  # the caller's executor: the grid leaves it open
    assert executor._abandoned  # closed before Ray was up: the start stops what it makes, nobody waits


def test_a_grid_on_the_auto_executor_starts_ray_only_once_it_pays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a study's trials: a grid's quick cells, forecast far under Ray's cost, run in process and never
    start the embedded Ray (the grid once started it at once: 0.65 of the sequential loop against 0.50 on
    a 1,000-run grid on 2 cores)."""
    started: list[WarmStartExecutor] = []
    monkeypatch.setattr(WarmStartExecutor, "start", lambda self: started.append(self))
    grid = {"name": "quick_auto", "blocks": [{"task": "faulty", "product": {"x": [1.0, 2.0, 3.0, 4.0]}}]}
    report = run_grid(grid, tmp_path, opts(executor="auto"))
    assert (report.executor, report.executed, report.counts["ok"]) == ("warm", 4, 4)
    assert started == []  # not at the start, not by the watcher: the forecast never paid
    assert sorted(ResultStore(tmp_path).read_runs("faulty")["square"].to_pylist()) == [1.0, 4.0, 9.0, 16.0]


def test_a_failing_cell_run_while_ray_starts_is_a_recorded_failure(tmp_path: Path) -> None:
    executor, _ = warm_executor(after=None)
    grid = {"name": "fails", "blocks": [{"task": "faulty", "product": {"x": [1.0, 2.0], "fail": [False, True]}}]}
    report = run_grid(grid, tmp_path, opts(), executor=executor)
    assert (report.counts["ok"], report.counts["failed"], executor.ran_locally) == (2, 2, 4)
    runs = ResultStore(tmp_path).read_runs("faulty").to_pandas().set_index("x")
    failed = runs[runs["status"] == "failed"]
    assert sorted(failed.index) == [1.0, 2.0] and failed["fail"].all()
    for x, error in failed["error"].items():
        assert error.startswith(f"RuntimeError: asked to fail with x={x}") and "Traceback" in error
    # failed runs are not done: the same command runs them again (here: in process again), never the ok ones
    rerun, _ = warm_executor(after=None)
    again = run_grid(grid, tmp_path, opts(), executor=rerun, retry_failed=True)
    assert (again.executed, again.already_done, rerun.ran_locally) == (2, 2, 2)


def test_a_study_with_a_pruner_prunes_in_process_while_ray_starts(tmp_path: Path) -> None:
    from runner.tune.driver import tune
    from tests.test_tune import prune_study

    raw = prune_study(tmp_path, "warm_prune", n_iters=400)
    executor, starts = warm_executor(after=None)  # Ray never comes up: the study must not wait for it
    executor.start()  # the start begins with the study (a study this short would not start Ray)
    (report,) = tune(raw, tmp_path, opts(), executor=executor)
    assert report.states == {"COMPLETE": 2, "PRUNED": 1} and executor.ran_locally == 3
    executor.close()  # the caller's executor: the study leaves it open
    assert not starts[0].warmed and executor._abandoned
    runs = ResultStore(tmp_path).read_runs("least_squares", ["status", "n_steps", "lr"]).to_pylist()
    (bad,) = [r for r in runs if r["lr"] == 0.06]
    # the direct channel stops the run at the first step the pruner judges, as the local executor's does
    assert bad["status"] == "pruned" and 20 <= bad["n_steps"] <= 30


def test_a_study_too_short_to_pay_for_ray_never_starts_it(tmp_path: Path) -> None:
    from runner.tune.driver import tune
    from tests.test_tune import prune_study

    raw = prune_study(tmp_path, "short", n_iters=400)
    executor, starts = warm_executor(after=None)
    (report,) = tune(raw, tmp_path, opts(), executor=executor)
    assert report.states == {"COMPLETE": 2, "PRUNED": 1} and executor.ran_locally == 3
    assert starts == []  # three fast trials, forecast far under Ray's cost: no start at all
    executor.close()


def test_a_short_study_with_baselines_never_starts_ray_either(tmp_path: Path) -> None:
    from runner.tune.driver import tune
    from tests.test_tune import ls_study

    raw = ls_study("short_base", n_trials=2, parallel=2, baselines=[{"params": {"lr_rule": "optimal", "lr": None}}])
    executor, starts = warm_executor(after=None)
    (report,) = tune(raw, tmp_path, opts(), executor=executor)
    assert report.states == {"COMPLETE": 2} and report.baselines[0]["status"] == "ok"
    assert starts == [] and executor.ran_locally == 3  # the baseline, as the trials, ran in process
    executor.close()


def faulty_items(n: int, sleep_s: float) -> list[WorkItem]:
    return [WorkItem(f"f{i:03d}", "faulty", {"x": float(i), "sleep_s": sleep_s, "seed": 0}) for i in range(n)]


def run_expecting(executor: WarmStartExecutor, items: list[WorkItem], left: int) -> int:
    """Execute `items` with `left` announced as the items to come (fixed); how many records came back."""
    executor.expect_items(lambda: left)
    try:
        return sum(len(r) for r in executor.execute(items))
    finally:
        executor.expect_items(None)


def test_ray_starts_once_the_timed_pace_forecasts_more_work_than_it_costs() -> None:
    # 20 ms an item, 2 workers: 1,000 items to come would save ~10 s on Ray; 10 items ~0.1 s
    long_work, starts = warm_executor(after=None, pool=RayExecutor(workers=2))
    long_work.cost_s = 1.0
    assert run_expecting(long_work, faulty_items(12, 0.02), left=1000) == 12
    assert len(starts) == 1 and not starts[0].warmed  # started once it paid, never waited for
    short_work, starts = warm_executor(after=None, pool=RayExecutor(workers=2))
    short_work.cost_s = 1.0
    assert run_expecting(short_work, faulty_items(12, 0.02), left=10) == 12
    assert starts == []
    for executor in (long_work, short_work):
        executor.close()


def test_a_first_run_longer_than_ray_costs_starts_ray_before_it_ends() -> None:
    # nothing timed yet: a run under way past cost / (1 - 1/workers) = 0.2 s is long work
    executor, starts = warm_executor(after=None, pool=RayExecutor(workers=2))
    executor.cost_s = 0.1
    assert run_expecting(executor, faulty_items(1, 1.0), left=1) == 1
    assert len(starts) == 1
    one_worker, starts = warm_executor(after=None, pool=RayExecutor(workers=1))
    one_worker.cost_s = 0.1
    assert run_expecting(one_worker, faulty_items(1, 0.5), left=1000) == 1
    assert starts == []  # one worker on Ray divides nothing: in process is as fast, without the cost
    for e in (executor, one_worker):
        e.close()


class StandInPool(RayExecutor):
    """A pool that starts nothing and records the items handed to it."""

    def __init__(self) -> None:
        super().__init__(workers=2)
        self.handed: list[str] = []

    def start(self) -> None:
        pass

    def worker_pids(self) -> list[int]:
        return []

    def execute(self, items: object, channel: object = None, doorbell: object = None) -> Iterator[list[RunRecord]]:
        self.handed += [item.run_id for item in cast(Iterable[WorkItem], items)]
        yield []

    def close(self) -> None:
        pass


def test_a_deferred_start_hands_the_rest_to_the_pool_once_up() -> None:
    pool = StandInPool()
    executor, starts = warm_executor(after=1, pool=pool)  # up at its second question after the start
    executor.cost_s = 0.0  # starts at the first record
    items = faulty_items(30, 0.02)  # 0.6 s in all: the watcher (every 0.1 s) starts Ray meanwhile
    ran = run_expecting(executor, items, left=30)
    assert len(starts) == 1 and starts[0].warmed
    assert ran == executor.ran_locally >= 1 and pool.handed == [i.run_id for i in items[ran:]]
    executor.close()


def test_ray_pays_only_for_the_runs_share_it_can_divide() -> None:
    from runner.execute.warm import ray_pays

    # 1,000 items of 20 ms on 2 workers: with 19 ms of run, Ray at best takes 9.5 ms an item (10.5 s saved);
    # with 2 ms of run the driver's 18 ms stay serial, so 2 s at most is saved, under a 5 s cost
    assert ray_pays(1000, 0.020, 0.019, 2, 5.0)
    assert not ray_pays(1000, 0.020, 0.002, 2, 5.0)
    # more workers divide the runs further: of 300 such items 8 workers save 5.3 s, 2 workers 3.2 s
    assert ray_pays(300, 0.020, 0.019, 8, 4.9) and not ray_pays(300, 0.020, 0.019, 2, 4.9)
    assert not ray_pays(1000, 0.5, 0.5, 1, 5.0)  # one worker overlaps nothing when the run is everything


def test_the_pace_of_runs_in_threads_takes_their_cpu_time_as_what_a_run_takes_alone() -> None:
    """Runs at once in threads: a run's wall time counts the time it waited for the GIL (or a core), so
    what it would take alone is its CPU time; one at a time, its wall time. With that, Ray is forecast
    to gain where the threads serialise and not where they overlap the runs as Ray would."""
    from runner.execute.warm import _Pace, ray_pays

    def means(at_once: int, interval_s: float, wall_s: float, cpu_s: float) -> tuple[float, float]:
        times = iter(interval_s * i for i in range(6))  # the pace's clock: records `interval_s` apart
        pace = _Pace(clock=lambda: next(times), process_cpu=lambda: 0.0)
        pace.at_once = at_once
        for i in range(5):  # the first record only starts the clock (first-call costs)
            pace.arrived([RunRecord(f"r{i}", "t", {"wall_s": wall_s}, {})], cpu_s=cpu_s * i)
        got = pace.means()
        assert got is not None
        return got[0], got[1]

    # two runs of 10 ms CPU in two threads that overlap: a record every 5 ms, each run's wall 10 ms
    item_s, run_s = means(2, 0.005, 0.010, 0.010)
    assert run_s == pytest.approx(0.010) and not ray_pays(10_000, item_s, run_s, 2, 5.0)
    # the same runs waiting for the GIL: a record every 10 ms, each run's wall 20 ms; Ray halves it
    item_s, run_s = means(2, 0.010, 0.020, 0.010)
    assert run_s == pytest.approx(0.010) and ray_pays(10_000, item_s, run_s, 2, 5.0)
    # one at a time the run's wall time stands, as before threads
    assert means(1, 0.012, 0.010, 0.001)[1] == pytest.approx(0.010)


def test_the_embedded_ray_cannot_divide_what_already_keeps_every_core_busy() -> None:
    """Ray's actors compute on the driver's cores: an item costs there at least the CPU this process spends
    on it over the cores. Measured on 2 cores, a 30 ms run in two threads, told and asked in its thread: a
    record every 24.7 ms, 29.1 ms of the run's CPU, ~35 ms of the process's. Without the bound 500 items
    looked worth 5.1 s on Ray (it started, and the study took 23.6 s where in process it takes ~16)."""
    from runner.execute.warm import _Pace, ray_pays

    assert ray_pays(500, 0.0247, 0.0291, 2, 5.0)  # the runs alone: halved on two actors
    assert not ray_pays(500, 0.0247, 0.0291, 2, 5.0, cpu_s=0.035, cpus=2)  # 17.5 ms an item at best: 3.6 s
    # runs that wait for the GIL in threads still gain: a record every 10 ms for 10 ms of CPU on 2 cores
    assert ray_pays(10_000, 0.010, 0.010, 2, 5.0, cpu_s=0.010, cpus=2)
    # a machine with more cores than the threads use leaves the runs' division as it was
    assert ray_pays(500, 0.0247, 0.0291, 2, 5.0, cpu_s=0.035, cpus=16)

    times, cpu = iter(0.025 * i for i in range(6)), iter(0.035 * i for i in range(6))
    pace = _Pace(clock=lambda: next(times), process_cpu=lambda: next(cpu))
    pace.at_once = 2
    for i in range(5):
        pace.arrived([RunRecord(f"r{i}", "t", {"wall_s": 0.05}, {})], cpu_s=0.029 * i)
    got = pace.means()
    assert got is not None and got == pytest.approx((0.025, 0.029, 0.035))
