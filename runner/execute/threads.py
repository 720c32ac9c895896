"""Runs at once in threads of this process: the in-process executor's pool (runner.execute.local).

torch releases the GIL inside its kernels, so runs of a thread-safe learner (tasks.base.is_thread_safe)
overlap their arithmetic in threads as they would in processes, without starting any: what
`study.optimize(n_jobs=2)` does, with each run in its own thread and its own torch thread count.

`RunThreads` keeps up to `workers` daemon threads, each running one unit (a list of items, run through
`run`) at a time; their records come back on one queue, read by the thread that submitted (the
executor's caller, where records are persisted and trials told). A unit submitted `alone` runs with
nothing beside it: nothing else is accepted until it is through (a learner that is not thread-safe).
Threads are daemons and the pool is one `execute` call's: a caller that stops early (Ctrl-C, an error)
does not wait for the runs under way, whose records are dropped, as a process's exit would drop them;
a thread starts nothing more of its unit once the pool is closed. An exception out of `run` (a bug
outside the tasks) reaches the caller after every record that arrived before it, so none is lost.
`on_record`, the source's (runner.execute.doorbell), is called with each record in the thread that made
it, before the record is queued, unless the pool is closed; what it raises is handled as from `run`, and
the CPU it takes (a tuner's tell and next ask) is not counted as the runs' (`cpu_s`).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from runner.execute.base import Reporter, ReporterFactory, WorkItem
from runner.execute.units import Unit
from runner.store.records import RunRecord

RunUnit = Callable[[Unit], Iterator[RunRecord]]


class RunThreads:
    def __init__(
        self,
        workers: int,
        run: RunUnit,
        setup: Callable[[], None],
        on_record: Callable[[RunRecord], None] | None = None,
    ) -> None:
        self.workers, self._run, self._setup = max(1, workers), run, setup
        self._on_record = on_record  # the source's, in the thread that made the record (runner.execute.doorbell)
        self._work: queue.SimpleQueue[tuple[int, Unit] | None] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[str, int, Any]] = queue.SimpleQueue()
        self._left: dict[int, int] = {}  # a unit in flight -> its records still to come
        self._ids = itertools.count()
        self._threads = 0
        self._closed = threading.Event()
        self._error: BaseException | None = None  # raised by `run`, for `check` once its records are out
        self.alone = False  # the unit in flight must run alone
        self.woken = False  # `wake` was called since the caller last reset this
        # CPU seconds of the units' runs finished so far (thread CPU time), without `on_record`'s: the warm
        # start reads it as what the runs alone cost (runner.execute.warm), and a tuner's ask is not a run's
        self.cpu_s = 0.0

    @property
    def in_flight(self) -> int:
        return len(self._left)

    @property
    def free(self) -> bool:
        return not self.alone and self.in_flight < self.workers

    def submit(self, unit: Unit, alone: bool = False) -> None:
        assert self.free and unit[0] and not (alone and self.in_flight), "no free slot for this unit"
        if self._threads <= self.in_flight:  # threads start as the work needs them
            threading.Thread(target=self._worker, name=f"convgrid-run-{self._threads}", daemon=True).start()
            self._threads += 1
        uid = next(self._ids)
        self._left[uid] = len(unit[0])  # a worker yields one record per item (runner.execute.worker.run_items)
        self.alone = alone
        self._work.put((uid, unit))

    def wake(self) -> None:
        """End the caller's `wait` now (any thread): its source has something (runner.execute.doorbell)."""
        self._done.put(("wake", -1, None))

    def wait(self, timeout: float) -> list[RunRecord]:
        """The records that arrived within `timeout` (all of them once one has, or once woken): [] if none
        did. A unit's slot frees with its last record. An exception raised by `run` is kept for `check`:
        the records that came before it are returned first."""
        try:
            events = [self._done.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                events.append(self._done.get_nowait())
            except queue.Empty:
                break
        records: list[RunRecord] = []
        for kind, uid, value in events:
            if kind == "wake":
                self.woken = True
            if kind == "error":
                self._error = self._error or value
                self._left.pop(uid, None)  # its records still missing never come
            if kind == "end":
                self.cpu_s += value
                if uid in self._left:
                    raise RuntimeError(f"a unit of runs ended with {self._left[uid]} of its records missing")
            if kind == "record":
                records.append(value)
                self._left[uid] -= 1
                if not self._left[uid]:
                    del self._left[uid]
                    self.alone = self.alone and bool(self._left)
        return records

    def check(self) -> None:
        """Raise the exception a unit's `run` raised, if one did (its records before it were returned)."""
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Let the threads end once their run under way is through (without waiting for them): the rest
        of their units is not started."""
        self._closed.set()
        for _ in range(self._threads):
            self._work.put(None)
        self._threads = 0

    def _worker(self) -> None:
        self._setup()
        while (job := self._work.get()) is not None:
            uid, unit = job
            cpu, hooks = time.thread_time(), 0.0  # `hooks`: the source's share of this thread's CPU, not the runs'
            try:
                for record in self._run(unit):
                    if self._on_record is not None and not self._closed.is_set():
                        before = time.thread_time()
                        try:
                            self._on_record(record)  # before the caller sees it (a tuner tells its trial here)
                        finally:
                            hooks += time.thread_time() - before
                    self._done.put(("record", uid, record))
                    if self._closed.is_set():
                        break  # the caller is gone: the rest of the unit would be computed for nothing
            except BaseException as exc:  # noqa: BLE001 - a bug outside the tasks' own (a judge's): the caller's
                self._done.put(("error", uid, exc))
            self._done.put(("end", uid, time.thread_time() - cpu - hooks))


class SerializedReporters:
    """A channel's reporters, each call made under one lock: the judge behind them (a study's pruner)
    then sees one value at a time, as from the Ray channel's single pump thread."""

    def __init__(self, inner: ReporterFactory) -> None:
        self.inner, self.lock = inner, threading.Lock()

    def __call__(self, item: WorkItem) -> Reporter | None:
        reporter = self.inner(item)
        if reporter is None:
            return None

        def report(step: int, metrics: Any) -> bool:
            with self.lock:
                return reporter(step, metrics)

        return report
