"""Asynchronous tuning: `parallel` trials in flight, a trial asked as each run finishes, records
written on the flush policy (one part for a short study), and the deterministic mode that tells
batches in trial-number order whatever order runs finish in.

A scripted executor (the Executor contract, runs in this process) finishes runs in an order the test
chooses, which Ray would give only by timing."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from runner.execute.base import Judge, ReportChannel, ReportSpec, WorkItem, WorkSource
from runner.execute.doorbell import Doorbell
from runner.execute.report_channel import LocalChannel
from runner.execute.worker import run_item
from runner.store import ResultStore, RunRecord
from runner.store.trials import read_trials
from runner.tune.driver import tune
from tests.options import opts
from tests.test_tune import ls_study


class ScriptedExecutor:
    """Pulls items until the source waits (at most `hold`), then finishes the newest one first (LIFO)
    or the oldest (FIFO). Logs each pull ("+run_id", or "wait") and each finished run ("-run_id"),
    and the sizes of the groups it was given."""

    name = "scripted"

    def __init__(self, lifo: bool, hold: int = 16) -> None:
        self.lifo, self.hold = lifo, hold
        self.log: list[str] = []
        self.groups: list[int] = []
        self.max_in_flight = 0

    def execute(
        self, items: WorkSource, channel: ReportChannel | None = None, doorbell: Doorbell | None = None
    ) -> Iterator[list[RunRecord]]:
        """Hears no doorbell: a source that waits answers in this thread."""
        source = iter(items)
        held: list[WorkItem] = []
        ended = False
        while True:
            while not ended and len(held) < self.hold:
                item = next(source, StopIteration)
                if item is StopIteration:
                    ended = True
                elif item is None:
                    self.log.append("wait")
                    break
                else:
                    group = item if isinstance(item, list) else [item]
                    self.groups.append(len(group))
                    self.log += ["+" + i.run_id for i in group]
                    held += group
            self.max_in_flight = max(self.max_in_flight, len(held))
            if not held:
                assert ended, "the source waited with nothing in flight"
                return
            item = held.pop() if self.lifo else held.pop(0)
            self.log.append("-" + item.run_id)
            reporter = channel.reporters(item) if channel is not None else None
            yield [run_item(item, reporter=reporter)]

    def start(self) -> None:
        pass

    def report_channel(self, judge: Judge, spec: ReportSpec) -> ReportChannel:
        return LocalChannel(judge, spec)

    def close(self) -> None:
        pass


def _trials(root: Path, study: str) -> list[tuple[int, str, str, float | None]]:
    return [
        (r["number"], r["state"], r["params_json"], r["value"])
        for r in read_trials(ResultStore(root), study).to_pylist()
    ]


def test_async_keeps_parallel_trials_in_flight_and_asks_as_each_finishes(tmp_path: Path) -> None:
    executor = ScriptedExecutor(lifo=True)
    raw = ls_study("async", n_trials=12, parallel=3, sampler={"name": "tpe", "seed": 1})
    (report,) = tune(raw, tmp_path, opts(flush_s=600), executor=executor)
    assert report.states == {"COMPLETE": 12} and report.ran == 12
    assert executor.max_in_flight == 3
    # after the first three, every finished run is followed at once by one new trial, then a wait
    first_finish = next(i for i, e in enumerate(executor.log) if e.startswith("-"))
    assert [e[0] for e in executor.log[:first_finish]] == ["+", "+", "+", "w"]
    steady = executor.log[first_finish : first_finish + 3 * 9]
    assert [e[0] for e in steady] == ["-", "+", "w"] * 9
    store = ResultStore(tmp_path)
    # every trial is a stored run, written as one part (flush by count and time, not per trial)
    rows = read_trials(store, "async").to_pylist()
    assert {r["run_id"] for r in rows} <= set(store.read_runs("least_squares", ["status"])["run_id"].to_pylist())
    assert len(store.parts("runs", "task=least_squares")) == 1


def test_deterministic_mode_tells_in_trial_order_whatever_order_runs_finish(tmp_path: Path) -> None:
    raw = ls_study("det", n_trials=9, parallel=3, mode="deterministic", sampler={"name": "tpe", "seed": 5})
    results = []
    for lifo in (False, True):
        executor = ScriptedExecutor(lifo=lifo)
        tune(raw, tmp_path / str(lifo), opts(), executor=executor)
        # a whole batch is asked before any run finishes, and the next only once all three are told
        pulls = [e[0] for e in executor.log]
        assert pulls == ["+", "+", "+", "w", "-", "w", "-", "w", "-"] * 3
        results.append(_trials(tmp_path / str(lifo), "det"))
    assert results[0] == results[1]  # the same trials, params and values, in FIFO and LIFO completion
    assert [n for n, *_ in results[0]] == list(range(9))


def test_deterministic_flag_and_file_key(tmp_path: Path) -> None:
    from runner.tune.optuna_adapter import load_plans
    from runner.tune.spec import with_overrides

    (plan,) = load_plans(ls_study("flag", n_trials=2))
    assert plan.mode == "async"
    assert with_overrides(plan, deterministic=True).mode == "deterministic"
    from runner.errors import ConfigError

    with pytest.raises(ConfigError, match="mode"):
        load_plans(ls_study("flag", n_trials=2, mode="fast"))


def test_trials_in_flight_with_the_same_params_share_one_run(tmp_path: Path) -> None:
    executor = ScriptedExecutor(lifo=True)
    raw = ls_study("shared", n_trials=6, parallel=3, sampler={"name": "random", "seed": 0})
    raw["space"] = {"lr": {"type": "categorical", "choices": [0.1, 0.2]}}
    (report,) = tune(raw, tmp_path, opts(), executor=executor)
    rows = read_trials(ResultStore(tmp_path), "shared").to_pylist()
    assert len(rows) == 6 and {r["state"] for r in rows} == {"COMPLETE"}
    # two points: each run sent to the executor once, the other trials share it or are told from the store
    assert report.ran == len({r["run_id"] for r in rows}) == 2
    assert sum(e.startswith("+") for e in executor.log) == 2


def test_a_batch_of_trials_is_asked_and_handed_over_as_one_group(tmp_path: Path) -> None:
    from runner.tune.driver import run_study
    from runner.tune.optuna_adapter import load_plans

    (plan,) = load_plans(ls_study("grouped", n_trials=12, parallel=6, sampler={"name": "random", "seed": 2}))
    # least_squares has no run_batch, so the file would refuse `batch: 3`; the grouping is the tuner's part
    executor = ScriptedExecutor(lifo=False)
    report = run_study(replace(plan, batch=3), tmp_path, executor, opts())
    assert report.states == {"COMPLETE": 12}
    assert executor.groups == [3, 3, 3, 3]  # never a trial alone: refilled when a whole group finished
    assert executor.max_in_flight == 6


def test_batch_needs_a_task_with_run_batch() -> None:
    from runner.errors import ConfigError
    from runner.tune.optuna_adapter import load_plans

    # the toy learner (tests/toy_learner) has no batched path; least_squares has one
    study = {
        "name": "b",
        "task": "faulty",
        "space": {"x": {"type": "float", "low": -1.0, "high": 1.0}},
        "objective": {"metric": "square", "direction": "minimize"},
        "n_trials": 4,
        "parallel": 4,
        "batch": 2,
    }
    with pytest.raises(ConfigError, match="no run_batch") as err:
        load_plans(study)
    load_plans(ls_study("b", n_trials=4, parallel=4, batch=2))  # accepted where the task batches
    assert err.value.key == "batch"


def test_a_pruned_run_asked_again_is_judged_afresh() -> None:
    """The report channel stays open for the whole study now: a stop verdict for a run must not
    reach a later run of the same id (a pruned point asked again), in the judge or the channel actor."""
    from runner.execute.channel_actor import _ReportChannelActor
    from runner.tune.pruning import PruningHub

    class Trial:
        def __init__(self, prune: bool) -> None:
            self.prune, self.reported = prune, []

    class Pruner:  # the study's side of `report`: the step is recorded, the pruner's verdict answered
        def report(self, trial: Trial, value: float, step: int) -> bool:
            trial.reported.append(step)
            return not trial.prune

    hub = PruningHub(Pruner())  # type: ignore[arg-type]
    hub.add("r", Trial(prune=True))
    assert hub.judge("r", 1, 0.5) is False and hub.judge("r", 2, 0.5) is False  # stopped, and stays so
    hub.finish("r")
    again = Trial(prune=False)
    hub.add("r", again)
    assert hub.judge("r", 1, 0.5) is True and again.reported == [1]
    hub.finish("r")
    assert hub.judge("r", 2, 0.5) is True and again.reported == [1]  # a told trial gets no more values

    channel = _ReportChannelActor()
    channel.stop(["r"])
    assert channel.report("r", 3, 0.5) is False  # the same run: stop
    assert channel.report("r", 1, 0.5, True) is True  # the first value of a new run of that id: judged afresh


def test_async_asks_overlap_and_runs_stay_within_parallel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """optimize(n_jobs=2)'s threads each ask their own trial, so the sampler's work for one overlaps the
    other's; the driver's asks do too: the first ask here waits (up to 10 s) for a second one to be under
    way, which asks made one after another would never see. Runs in flight stay within `parallel`."""
    import threading

    from runner.tune.optuna_adapter import Study

    ask = Study.ask
    lock, asking, asks, seen = threading.Lock(), [0], [0], []
    both = threading.Event()

    def overlapping_ask(self: Study) -> object:
        with lock:
            asking[0] += 1
            asks[0] += 1
            first_two = asks[0] <= 2  # the study's first two asks wait; after them each goes its own way
            if asking[0] == 2:
                both.set()
        if first_two:
            seen.append(both.wait(timeout=10))
        try:
            return ask(self)
        finally:
            with lock:
                asking[0] -= 1

    monkeypatch.setattr(Study, "ask", overlapping_ask)
    executor = ScriptedExecutor(lifo=False)
    raw = ls_study("overlap", n_trials=8, parallel=2, sampler={"name": "random", "seed": 0})
    (report,) = tune(raw, tmp_path, opts(), executor=executor)
    assert report.states == {"COMPLETE": 8} and report.ran + report.from_store == 8
    assert seen == [True, True]  # the second ask started while the first was under way
    assert executor.max_in_flight == 2


def test_asks_under_way_when_max_failed_is_reached_run_and_leave_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two trials asked at once; the one whose params the task rejects is answered first and reaches
    max_failed, while the other's ask is still under way: that trial runs and is told, as a trial in flight
    would be, instead of staying RUNNING in the storage once the study has ended."""
    import threading

    import optuna

    from runner.tune.optuna_adapter import State, Study, open_storage
    from tests.test_tune import enqueue

    ask, tell = Study.ask, Study.tell
    rejected_told = threading.Event()

    def after_the_rejection_when_valid(self: Study) -> object:
        asked = ask(self)
        if asked.params["lr"] > 0:  # the rejected trial's answer comes first, however the threads are scheduled
            assert rejected_told.wait(timeout=60), "the rejected trial was never told"
        return asked

    def tell_noting_a_failure(
        self: Study, trial: object, values: object = None, state: State = State.COMPLETE
    ) -> object:
        told = tell(self, trial, values, state)  # type: ignore[arg-type]
        if state == State.FAIL:
            rejected_told.set()
        return told

    monkeypatch.setattr(Study, "ask", after_the_rejection_when_valid)
    monkeypatch.setattr(Study, "tell", tell_noting_a_failure)
    raw = ls_study("limit", n_trials=6, parallel=2, max_failed=1, sampler={"name": "random", "seed": 0})
    raw["space"] = {"lr": {"type": "float", "low": 0.05, "high": 0.6}}
    enqueue(tmp_path, raw, [{"lr": -1.0}, {"lr": 0.1}])  # lr <= 0, outside the space: the task rejects it
    (report,) = tune(raw, tmp_path, opts(), executor=ScriptedExecutor(lifo=False))
    # the other trial was being asked when the limit was reached: it ran, and the line says so
    assert report.stopped_early == "max_failed (1) reached; 1 trials in flight then ran to their end"
    storage = open_storage(None, ResultStore(tmp_path)).optuna_storage
    states = sorted(t.state.name for t in optuna.load_study(study_name="limit", storage=storage).trials)
    assert states == ["COMPLETE", "FAIL"]


def test_in_process_threads_tell_a_trial_and_ask_the_next_in_the_run_s_own_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs in threads of this process: as in `study.optimize(n_jobs=2)`, the thread whose run ended tells
    its trial and then asks the trial that takes its slot; every trial after the first `parallel` is asked
    there, right after that thread's tell, and never with more than `parallel` trials in flight."""
    import threading

    from runner.execute.local import LocalExecutor
    from runner.tune.optuna_adapter import State, Study

    ask, tell = Study.ask, Study.tell
    lock = threading.Lock()
    events: dict[str, list[str]] = {}  # thread -> "ask"/"tell", in its order
    running_at_ask: list[int] = []

    def log(what: str) -> None:
        with lock:
            events.setdefault(threading.current_thread().name, []).append(what)

    def logged_ask(self: Study) -> object:
        running_at_ask.append(len(self.trials((State.RUNNING,))))
        log("ask")
        return ask(self)

    def logged_tell(self: Study, *args: object, **kwargs: object) -> object:
        told = tell(self, *args, **kwargs)  # type: ignore[arg-type]
        log("tell")
        return told

    monkeypatch.setattr(Study, "ask", logged_ask)
    monkeypatch.setattr(Study, "tell", logged_tell)
    n, parallel = 12, 2
    raw = ls_study("here", n_trials=n, parallel=parallel, sampler={"name": "random", "seed": 0})
    (report,) = tune(raw, tmp_path, opts(flush_s=600), executor=LocalExecutor(workers=parallel))
    assert report.states == {"COMPLETE": n} and report.ran == n
    in_runs = {name: seq for name, seq in events.items() if name.startswith("convgrid-run")}
    assert sum(seq.count("ask") for seq in in_runs.values()) == n - parallel  # all but the first ones
    for seq in in_runs.values():  # each ask there follows that thread's own tell
        assert all(i > 0 and seq[i - 1] == "tell" for i, e in enumerate(seq) if e == "ask"), seq
    assert max(running_at_ask) <= parallel - 1
    rows = read_trials(ResultStore(tmp_path), "here").to_pylist()
    stored = set(ResultStore(tmp_path).read_runs("least_squares", ["status"])["run_id"].to_pylist())
    assert len(rows) == n and {r["run_id"] for r in rows} <= stored


def test_an_ask_that_fails_in_a_run_s_thread_stops_the_study_with_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage fails while a run's thread asks: the study stops with that error (it neither hangs nor
    goes on short of a slot), and what was told before it is in the store."""
    import threading

    from runner.execute.local import LocalExecutor
    from runner.tune.optuna_adapter import Study

    ask = Study.ask
    asks = [0]

    def failing_ask(self: Study) -> object:
        asks[0] += 1
        if asks[0] == 5:
            assert threading.current_thread().name.startswith("convgrid-run")
            raise RuntimeError("the storage went away")
        return ask(self)

    monkeypatch.setattr(Study, "ask", failing_ask)
    raw = ls_study("fails", n_trials=10, parallel=2, sampler={"name": "random", "seed": 0})
    with pytest.raises(RuntimeError, match="the storage went away"):
        tune(raw, tmp_path, opts(), executor=LocalExecutor(workers=2))
    rows = read_trials(ResultStore(tmp_path), "fails").to_pylist()
    assert sum(r["state"] == "COMPLETE" for r in rows) >= 2


@pytest.mark.parametrize("max_failed", [None, 1])
def test_params_rejected_in_a_run_s_thread_count_as_failed_and_leave_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_failed: int | None
) -> None:
    """The third trial, asked in the thread of the first run to end, has params the task rejects: it is
    told FAIL there and counted at once, and the driver asks another in its place (or, at max_failed 1,
    stops the study once the trials in flight are told). No trial is left RUNNING either way.

    The other run's thread may ask a trial while the rejected one is being asked (both decided before
    the failure was known, as in optimize's threads). Under load that trial could run and end within the
    rejected ask, and its thread then ask again before the count: so the runs of trials asked after the
    first two wait here until the rejection is counted, which makes the outcome the design's, not the
    scheduler's."""
    import threading

    import optuna

    from runner.execute.local import LocalExecutor
    from runner.tune.optuna_adapter import Study, open_storage
    from runner.tune.schedule import TrialSchedule
    from tasks.least_squares.task import LeastSquaresTask
    from tests.test_tune import enqueue

    ask, ask_one, run = Study.ask, TrialSchedule.ask_one, LeastSquaresTask.run
    rejected_in: list[str] = []
    counted = threading.Event()

    def noting_ask(self: Study) -> object:
        asked = ask(self)
        if asked.params["lr"] < 0:
            rejected_in.append(threading.current_thread().name)
        return asked

    def counting_ask_one(self: TrialSchedule, rejected: Any = None) -> Any:
        def count() -> None:
            if rejected is not None:
                rejected()
            counted.set()

        return ask_one(self, count)

    def later_runs_wait(self: Any, p: Any, ctx: Any) -> Any:
        if p.lr not in (0.1, 0.2):  # a trial asked after the first two
            assert counted.wait(60.0)  # never reached when correct
        return run(self, p, ctx)

    monkeypatch.setattr(Study, "ask", noting_ask)
    monkeypatch.setattr(TrialSchedule, "ask_one", counting_ask_one)
    monkeypatch.setattr(LeastSquaresTask, "run", later_runs_wait)
    extra = {} if max_failed is None else {"max_failed": max_failed}
    raw = ls_study("rejects", n_trials=6, parallel=2, sampler={"name": "random", "seed": 0}, **extra)
    raw["space"] = {"lr": {"type": "float", "low": 0.05, "high": 0.6}}
    enqueue(tmp_path, raw, [{"lr": 0.1}, {"lr": 0.2}, {"lr": -1.0}])  # lr <= 0: the task rejects it
    (report,) = tune(raw, tmp_path, opts(), executor=LocalExecutor(workers=2))
    assert len(rejected_in) == 1 and rejected_in[0].startswith("convgrid-run")
    storage = open_storage(None, ResultStore(tmp_path)).optuna_storage
    states = [t.state.name for t in optuna.load_study(study_name="rejects", storage=storage).trials]
    assert "RUNNING" not in states and states.count("FAIL") == 1
    (failed,) = [t for t in optuna.load_study(study_name="rejects", storage=storage).trials if t.state.name == "FAIL"]
    assert failed.user_attrs["note"] == "params rejected by the task: lr: Input should be greater than 0"  # the reason
    if max_failed is None:
        assert report.states == {"COMPLETE": 6, "FAIL": 1} and report.stopped_early is None
    else:
        assert report.stopped_early is not None and report.stopped_early.startswith("max_failed (1) reached")
        assert states.count("COMPLETE") in (2, 3)  # the first two, and the other slot's if asked meanwhile
