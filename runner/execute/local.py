"""LocalExecutor: every cell in the calling process, as one batched call for consecutive cells with equal
batch keys, and up to `workers` runs at once in threads where the learner is thread-safe
(tasks.base.is_thread_safe): torch releases the GIL in its kernels, so the runs of a small study or grid
overlap on a workstation's cores without Ray. A learner that does not declare itself thread-safe runs
one run (or batch) at a time, with nothing beside it. With one worker everything runs in the calling
thread (breakpoints and tracebacks work as in a plain loop). Same records, same order of events, as
the Ray executor.

Each run computes with `threads` torch threads, set in every thread that runs one (torch's thread
count is per thread): `workers * threads` should not exceed the CPU slots, which the default keeps.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field

from runner.execute.base import (
    BatchPolicy,
    FeedStalled,
    Judge,
    ReportChannel,
    ReporterFactory,
    ReportSpec,
    WorkSource,
)
from runner.execute.doorbell import Doorbell
from runner.execute.feed import Feed
from runner.execute.report_channel import LocalChannel
from runner.execute.threads import RunThreads, SerializedReporters
from runner.execute.units import Unit, Units
from runner.store.records import RunRecord

POLL_S = 0.5  # with runs in threads, an empty list this often while none finishes (the caller's flush clock)


def cpu_slots() -> int:
    """The CPUs this process may use (its affinity, which a container's CPU set narrows)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass
class LocalExecutor:
    """Runs cells in the calling process: in threads, up to `workers` at once, for thread-safe learners."""

    threads: int = 1  # torch/BLAS threads per run
    timeout_s: float | None = None
    batch: bool = True
    max_batch: int = 64
    device: str = "cpu"  # "cuda": tasks that compute on ctx.device use this process's GPU
    workers: int | None = None  # runs at once; None: one per CPU slot (cpu_slots() // threads), 1 on a GPU
    name: str = "local"
    cpu_s: float = field(default=0.0, init=False)  # CPU seconds of the runs so far, in the threads that ran them
    _safe: dict[str, bool] = field(default_factory=dict, init=False, repr=False)  # task name -> thread-safe

    @property
    def slots(self) -> int:
        """How many runs may run at once (thread-safe learners only). On a GPU one by default: its
        kernels queue on one stream, where threads would only interleave their launches (not measured)."""
        if self.workers is not None:
            return self.workers
        return 1 if self.device.startswith("cuda") else max(1, cpu_slots() // self.threads)

    def execute(
        self, items: WorkSource, channel: ReportChannel | None = None, doorbell: Doorbell | None = None
    ) -> Iterator[list[RunRecord]]:
        from runner.execute.worker import configure_threads  # imports the tasks (and torch)

        configure_threads(self.threads)
        units = Units(Feed(items), self.batch, self.max_batch)
        reporters = channel.reporters if channel is not None else None
        if self.slots == 1:  # nothing runs between two pulls here: the source must answer in this thread
            yield from self._inline(units, reporters)
        else:
            yield from self._threaded(units, SerializedReporters(reporters) if reporters else None, doorbell)

    def _run(self, reporters: ReporterFactory | None) -> Callable[[Unit], Iterator[RunRecord]]:
        from runner.execute import worker

        policy = BatchPolicy(enabled=self.batch, max_size=self.max_batch)

        def run(unit: Unit) -> Iterator[RunRecord]:
            items, members = unit
            return worker.run_items(
                items,
                device=self.device,
                threads=self.threads,
                timeout_s=self.timeout_s,
                reporters=reporters,
                policy=policy,
                members=members,
            )

        return run

    def _inline(self, units: Units, reporters: ReporterFactory | None) -> Iterator[list[RunRecord]]:
        """One worker: each unit runs in this thread as soon as it is cut."""
        run = self._run(reporters)
        while (unit := units.next(1)) is not None:
            records = run(unit)
            while True:  # the CPU time of the runs only, not of what the caller does with their records
                cpu = time.thread_time()
                record = next(records, None)
                self.cpu_s += time.thread_time() - cpu
                if record is None:
                    break
                yield [record]
            units.arrived()
        if not units.feed.done:
            raise FeedStalled()  # nothing runs between two pulls here, so a waiting source waits forever

    def _threaded(
        self, units: Units, reporters: ReporterFactory | None, doorbell: Doorbell | None
    ) -> Iterator[list[RunRecord]]:
        """Several workers: units go to threads as slots free up; a unit of a learner that is not
        thread-safe waits until nothing else runs, and runs alone. The source's doorbell ends a wait for
        records, so its answer is pulled as soon as it has one, and its `on_record` sees each record in
        the thread that ran it."""
        from runner.execute.worker import set_torch_threads

        on_record = doorbell.on_record if doorbell is not None else None
        pool = RunThreads(self.slots, self._run(reporters), lambda: set_torch_threads(self.threads), on_record)
        try:
            with doorbell.listen(pool.wake) if doorbell is not None else nullcontext():
                yield from self._threads_loop(units, pool)
        finally:
            pool.close()

    def _threads_loop(self, units: Units, pool: RunThreads) -> Iterator[list[RunRecord]]:
        held: Unit | None = None  # a unit cut but waiting to run alone
        while True:
            while pool.free and (unit := held or units.next(pool.workers)) is not None:
                alone = self.at_once(item.task for item in unit[0]) == 1
                if alone and pool.in_flight:
                    held = unit
                    break
                pool.submit(unit, alone)
                held = None
            if not pool.in_flight and held is None:
                if units.feed.done:
                    return
                raise FeedStalled()
            records = pool.wait(POLL_S)
            self.cpu_s += pool.cpu_s
            pool.cpu_s = 0.0
            if records or pool.woken:
                units.arrived()  # the source may answer now
            if records or not pool.woken:
                yield records  # [] when nothing finished for a while: the caller's chance to flush on time
            pool.woken = False
            pool.check()  # a bug in the worker's own path, once the records before it are out

    def at_once(self, tasks: Iterable[str]) -> int:
        """How many runs of these tasks may run at once here: the slots if every one is thread-safe, else 1."""
        from tasks.base import is_thread_safe
        from tasks.registry import get_task

        for name in set(tasks):
            if name not in self._safe:
                try:
                    self._safe[name] = is_thread_safe(get_task(name))
                except Exception:  # noqa: BLE001 - a task that cannot load fails as a record, alone
                    self._safe[name] = False
            if not self._safe[name]:
                return 1
        return self.slots

    def start(self) -> None:
        pass  # nothing to acquire: runs execute in this process

    def report_channel(self, judge: Judge, spec: ReportSpec) -> ReportChannel:
        return LocalChannel(judge, spec)

    def close(self) -> None:
        pass
