"""Runs at once in threads (runner.execute.local, runner.execute.threads): every shipped learner declares
itself thread-safe and stores, run beside others in threads, bit for bit what it stores alone; a learner
that does not declare it runs alone; the executor keeps its contract (each item once, completion order,
a stalled source, a judge's error) with threads."""

from __future__ import annotations

import struct
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from runner.execute.base import FeedStalled, ReportSpec, WorkItem
from runner.execute.local import LocalExecutor
from runner.grid.identity import validate_params
from runner.store.records import RunRecord
from tasks import get_task
from tasks.base import Result, RunContext, is_thread_safe
from tasks.registry import builtin_task_names
from tests.waiting import until

TASKS = builtin_task_names()
# Fields of a record that say when and how long, not what: the only ones allowed to differ.
WHEN = {"wall_s", "started", "finished", "run_id"}
TIMEOUT_S = 60.0  # a rendezvous that does not happen within this fails the run (never reached when correct)


def _bits(value: Any) -> Any:
    """A value as its exact bits: floats by their IEEE bytes (NaN included), containers element-wise."""
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, list | tuple):
        return [_bits(v) for v in value]
    if isinstance(value, dict):
        return {k: _bits(v) for k, v in value.items()}
    return value


def _stored(record: RunRecord) -> dict[str, Any]:
    return _bits({"row": {k: v for k, v in record.row.items() if k not in WHEN}, "curve": record.curve})


def _items(name: str, copies: int) -> list[WorkItem]:
    task = get_task(name)
    raws = list(task.examples) + ([task.diverging_example] if task.diverging_example is not None else [])
    out = []
    for k, raw in enumerate(raws):
        params = validate_params(task, raw).model_dump(mode="json")
        out += [WorkItem(f"{name}-{k}-{c}", name, params) for c in range(copies)]
    return out


def _records(executor: LocalExecutor, items: list[WorkItem]) -> list[RunRecord]:
    return [r for records in executor.execute(iter(items)) for r in records]


@pytest.mark.parametrize("name", TASKS)
def test_every_shipped_learner_declares_itself_thread_safe(name: str) -> None:
    assert is_thread_safe(get_task(name)), f"{name}: declare thread_safe = True once its runs share no state"


@pytest.mark.parametrize("name", TASKS)
def test_runs_in_threads_store_bit_for_bit_what_they_store_alone(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four copies of each example (and of the diverging one) start at once in four threads, through the
    executor, and every stored value, curves included, must equal that example's run alone. The copies
    meet at a barrier before they start, and the GIL changes hands every microsecond meanwhile (instead
    of every 5 ms), so that the runs interleave from their first draw: a draw from a shared generator
    (torch's global one after `manual_seed`, say) between another copy's seeding and its draw changes
    both, and a cache written by one is read by another while it is being filled."""
    alone = {r.run_id.rsplit("-", 1)[0]: _stored(r) for r in _records(LocalExecutor(workers=1), _items(name, 1))}
    task, copies = type(get_task(name)), 4
    start, run = threading.Barrier(copies, timeout=TIMEOUT_S), task.run

    def together_from_the_start(this: Any, p: Any, ctx: RunContext) -> Result:
        start.wait()
        return run(this, p, ctx)

    monkeypatch.setattr(task, "run", together_from_the_start)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        items = _items(name, copies)  # each example's copies one after the other: one per thread
        together = _records(LocalExecutor(workers=copies, batch=False), items)
    finally:
        sys.setswitchinterval(switch)
    assert sorted(r.run_id for r in together) == sorted(i.run_id for i in items)  # each once
    for record in together:
        assert record.row["status"] in ("ok", "diverged"), record.row.get("error")
        assert _stored(record) == alone[record.run_id.rsplit("-", 1)[0]], record.run_id


class Overlaps:
    """Counts the runs of the wrapped learners in flight: the most at once, and whether a run of an
    `alone` learner ever had another run beside it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now, self.most, self.alone_now, self.shared = 0, 0, 0, False

    def wrap(self, monkeypatch: pytest.MonkeyPatch, name: str, alone: bool = False) -> type:
        task = type(get_task(name))
        run = task.run

        def counted(this: Any, p: Any, ctx: RunContext) -> Result:
            with self.lock:
                self.now += 1
                self.alone_now += alone
                self.most = max(self.most, self.now)
                self.shared = self.shared or (self.alone_now > 0 and self.now > 1)
            try:
                return run(this, p, ctx)
            finally:
                with self.lock:
                    self.now -= 1
                    self.alone_now -= alone

        monkeypatch.setattr(task, "run", counted)
        return task


def _faulty(n: int, **params: Any) -> list[WorkItem]:
    return [WorkItem(f"f{i}", "faulty", {"x": float(i), **params}) for i in range(n)]


def test_runs_of_a_thread_safe_learner_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs meet at a barrier: each finishes only if the other is running at the same time."""
    overlaps = Overlaps()
    task = overlaps.wrap(monkeypatch, "faulty")
    monkeypatch.setattr(task, "thread_safe", True, raising=False)
    barrier, run = threading.Barrier(2, timeout=TIMEOUT_S), task.run

    def meeting(self: Any, p: Any, ctx: RunContext) -> Result:
        barrier.wait()
        return run(self, p, ctx)

    monkeypatch.setattr(task, "run", meeting)
    records = _records(LocalExecutor(workers=2), _faulty(4))
    assert [r.row["status"] for r in records] == ["ok"] * 4, records[0].row.get("error")
    assert overlaps.most == 2


def test_a_learner_not_declared_thread_safe_runs_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy learner does not declare itself thread-safe: with four workers, its runs (which sleep
    while reporting, so they would overlap) never run beside another run, of any learner."""
    assert not is_thread_safe(get_task("faulty"))
    overlaps = Overlaps()
    overlaps.wrap(monkeypatch, "faulty", alone=True)
    overlaps.wrap(monkeypatch, "least_squares")
    ls = {"d_in": 10, "d_out": 2, "m": 20, "n_iters": 20}
    safe = [WorkItem(f"ls{i}", "least_squares", {**ls, "seed": i}) for i in range(4)]
    items = safe[:2] + _faulty(4, sleep_s=0.03) + safe[2:]
    records = _records(LocalExecutor(workers=4, batch=False), items)
    assert sorted(r.run_id for r in records) == sorted(i.run_id for i in items)
    assert all(r.row["status"] == "ok" for r in records)
    assert not overlaps.shared


def test_records_come_in_completion_order_each_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run waits until the caller has received the second's record: completion order, not
    submission order, and the caller sees a record before the run it unblocks finishes."""
    task = type(get_task("faulty"))
    monkeypatch.setattr(task, "thread_safe", True, raising=False)
    second_seen, run = threading.Event(), task.run

    def waiting(self: Any, p: Any, ctx: RunContext) -> Result:
        if p.x == 0:
            assert second_seen.wait(TIMEOUT_S), "the second run's record never reached the caller"
        return run(self, p, ctx)

    monkeypatch.setattr(task, "run", waiting)
    order = []
    for records in LocalExecutor(workers=2).execute(iter(_faulty(2))):
        order += [r.run_id for r in records]
        if "f1" in order:
            second_seen.set()
    assert order == ["f1", "f0"]


def test_a_source_that_waits_with_nothing_in_flight_stalls_with_threads() -> None:
    def source() -> Iterator[WorkItem | None]:
        yield None

    with pytest.raises(FeedStalled):
        list(LocalExecutor(workers=2).execute(source()))


def test_a_tuner_source_gets_its_pending_trials_run_in_threads_not_batched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two trials pending at once (then None: the source waits) run in two threads at once, not as one
    batch in one; with one worker the same two run one after the other."""
    ls = {"d_in": 10, "d_out": 2, "m": 20, "n_iters": 20}
    items = [WorkItem(f"ls{i}", "least_squares", {**ls, "seed": i}) for i in range(2)]
    seen: list[list[str]] = []
    from runner.execute import worker

    run_items = worker.run_items

    def spy(unit: list[WorkItem], **kwargs: Any) -> Iterator[RunRecord]:
        seen.append([i.run_id for i in unit])
        return run_items(unit, **kwargs)

    monkeypatch.setattr(worker, "run_items", spy)

    def source() -> Iterator[WorkItem | None]:
        yield from items
        yield None

    assert len([r for rs in LocalExecutor(workers=2).execute(source()) for r in rs]) == 2
    assert sorted(seen) == [["ls0"], ["ls1"]]
    seen.clear()
    records = [r for rs in LocalExecutor(workers=1).execute(source()) for r in rs]
    assert len(records) == 2 and seen == [["ls0", "ls1"]]  # one worker: the pending pair is one batch


def test_a_judge_sees_one_value_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs in four threads report to one judge (a study's pruner): one call at a time, as from the Ray
    channel's one pump thread."""
    monkeypatch.setattr(type(get_task("faulty")), "thread_safe", True, raising=False)
    lock, inside, most = threading.Lock(), [0], [0]
    values: list[tuple[str, int]] = []

    def judge(run_id: str, step: int, value: float) -> bool:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        threading.Event().wait(0.001)  # a second caller would come in meanwhile, were it let in
        values.append((run_id, step))
        with lock:
            inside[0] -= 1
        return True

    executor = LocalExecutor(workers=4)
    channel = executor.report_channel(judge, ReportSpec("value"))
    records = [r for rs in executor.execute(iter(_faulty(4, sleep_s=0.1)), channel) for r in rs]
    assert [r.row["status"] for r in records] == ["ok"] * 4
    assert {run_id for run_id, _ in values} == {"f0", "f1", "f2", "f3"} and most[0] == 1


def test_an_error_outside_the_tasks_reaches_the_caller_with_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's exception is a failed record; one in the worker's own path (a bug) is raised to the caller."""
    from runner.execute import worker

    def broken(unit: list[WorkItem], **kwargs: Any) -> Iterator[RunRecord]:
        raise RuntimeError("a bug in the worker")

    monkeypatch.setattr(worker, "run_items", broken)
    with pytest.raises(RuntimeError, match="a bug in the worker"):
        _records(LocalExecutor(workers=2), _faulty(3))


def _record(item: WorkItem) -> RunRecord:
    return RunRecord(item.run_id, item.task, {"status": "ok"}, {})


def _until(condition: Any) -> None:
    until(condition, TIMEOUT_S, "the pool's thread")


def test_records_before_a_bug_reach_the_caller_before_the_bug() -> None:
    """A unit's `run` yields one record, then raises (a bug outside the tasks): once both (and the unit's
    end) are on the pool's queue, `wait` returns the record, and only `check` raises the bug."""
    from runner.execute.threads import RunThreads

    def run(unit: Any) -> Iterator[RunRecord]:
        yield _record(unit[0][0])
        raise RuntimeError("a bug in the worker")

    pool = RunThreads(2, run, lambda: None)
    pool.submit(([WorkItem("a", "faulty", {}), WorkItem("b", "faulty", {})], None))
    _until(lambda: pool._done.qsize() == 3)  # record, error, end: all in one `wait`
    assert [r.run_id for r in pool.wait(TIMEOUT_S)] == ["a"]
    assert pool.in_flight == 0  # b's record never comes: its slot is free
    with pytest.raises(RuntimeError, match="a bug in the worker"):
        pool.check()
    pool.close()


def test_a_closed_pool_starts_nothing_more_of_a_unit() -> None:
    """The caller stops (Ctrl-C) while a unit of three runs is under way: its thread finishes the run
    under way and starts neither of the others."""
    from runner.execute.threads import RunThreads

    closed, finished, ran = threading.Event(), threading.Event(), []

    def run(unit: Any) -> Iterator[RunRecord]:
        try:
            for item in unit[0]:
                if not ran:
                    assert closed.wait(TIMEOUT_S)  # the first run ends once the caller has gone
                ran.append(item.run_id)
                yield _record(item)
        finally:
            finished.set()

    pool = RunThreads(2, run, lambda: None)
    pool.submit(([WorkItem(x, "faulty", {}) for x in "abc"], None))
    pool.close()
    closed.set()
    assert finished.wait(TIMEOUT_S)
    assert ran == ["a"]


def _burn(cpu_s: float) -> None:
    """Spend `cpu_s` seconds of this thread's CPU (not of the clock: a busy machine only takes longer)."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def test_the_runs_cpu_leaves_out_what_the_source_does_with_their_records() -> None:
    """The warm start reads the pool's CPU seconds as what the runs alone cost: a tuner's tell and next ask,
    made in the run's thread by the source's `on_record`, are not a run's. Two runs of 0.05 CPU seconds
    and a hook of 0.15 on each record: the pool counts the runs' 0.1, not the hooks' 0.3."""
    from runner.execute.threads import RunThreads

    def run(unit: Any) -> Iterator[RunRecord]:
        for item in unit[0]:
            _burn(0.05)
            yield _record(item)

    pool = RunThreads(1, run, lambda: None, on_record=lambda _record: _burn(0.15))
    pool.submit(([WorkItem("a", "faulty", {}), WorkItem("b", "faulty", {})], None))
    records: list[RunRecord] = []
    deadline = time.monotonic() + TIMEOUT_S
    while (pool.in_flight or not pool.cpu_s) and time.monotonic() < deadline:  # the unit's end brings its CPU
        records += pool.wait(0.1)
    pool.close()
    assert [r.run_id for r in records] == ["a", "b"]
    assert 0.1 <= pool.cpu_s < 0.2


@pytest.mark.parametrize("ring", [True, False])
def test_a_source_that_rings_its_doorbell_is_pulled_before_the_next_record(
    monkeypatch: pytest.MonkeyPatch, ring: bool
) -> None:
    """A source answers None (its next trial is being asked on another thread) while one run is in flight,
    and rings once its answer is ready: the executor pulls it at once, and the second run starts and ends
    while the first still runs (the first waits for the second's record). Without the ring the source is
    asked again only after the first run's record: the first run gives up waiting, and ends first."""
    from runner.execute.doorbell import Doorbell

    task = type(get_task("faulty"))
    monkeypatch.setattr(task, "thread_safe", True, raising=False)
    second_seen, run = threading.Event(), task.run
    wait_s = 10.0 if ring else 1.0  # without a ring the second record cannot come: wait less for nothing

    def waiting(self: Any, p: Any, ctx: RunContext) -> Result:
        if p.x == 0:
            second_seen.wait(wait_s)
        return run(self, p, ctx)

    monkeypatch.setattr(task, "run", waiting)
    doorbell = Doorbell()

    def source() -> Iterator[WorkItem | None]:
        first, second = _faulty(2)
        yield first
        if ring:
            threading.Timer(0.05, doorbell.ring).start()  # the answer is ready elsewhere
        yield None
        yield second

    order = []
    for records in LocalExecutor(workers=2).execute(source(), None, doorbell if ring else None):
        order += [r.run_id for r in records]
        if "f1" in order:
            second_seen.set()
    assert order == (["f1", "f0"] if ring else ["f0", "f1"])
    assert not doorbell.listening  # the executor stopped listening when it returned
