"""Work starts before Ray is up: the embedded Ray pool, with cells run in this process while Ray starts.

Starting the embedded Ray and letting its actors import torch takes seconds, during which the driver
would only wait. `WarmStartExecutor` starts Ray in a thread of its own (cluster.background) and
meanwhile runs the cells of the same lazy source here, through the in-process executor with the actors'
thread count and as many runs at once as the pool has workers (threads, for a thread-safe learner).
Once every actor has answered, the rest of the source goes to the Ray pool.
Both phases yield their records to the one caller, so flushes, commits, claims (runner.execute.waves),
progress and resume see a single stream, and each item is run once: a batch being run here when Ray
comes up finishes here, the items after it go to Ray. A source that ends before Ray is up never waits
for it: `close` leaves the start to finish in its thread and stop the actors it made, and a process
that exits meanwhile takes the half-started Ray with it.

A tuner's pruner follows its runs through `WarmChannel`: the judge is called directly by the runs in
this process, and through the pool's channel actor (made once Ray is up) by the runs on Ray, so a
study with a pruner starts at once too.

Where the caller says how many items are still to come (`expect_items`, a study's trials left;
`expect_total`, a grid's cells), Ray is not even started until it pays: a watcher times the items in
process, runs and the driver's work around them apart, and starts Ray once what Ray would save on the
items left exceeds what it costs (`ray_pays`: the runs divided among its workers, overlapping the
driver's own work, which is not). Short work then ends without ever starting Ray, as `--executor local`
would, and long work, or slow runs, or runs that wait on each other's GIL, moves to Ray after a few.
Ray's cost (`CONVGRID_RAY_COST_S`, 5 s) is what starting the embedded Ray, warming its actors and
stopping it added to a study on a 2-core machine
(docs/performance_log.md).

Only for the embedded Ray, without hard timeouts and GPU actors (`runner.execute.auto` decides):
a run here cannot be killed past its deadline, and it computes on the driver's CPU.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from runner.execute.base import Judge, ReportChannel, ReporterFactory, ReportSpec, WorkItem, WorkSource
from runner.execute.doorbell import Doorbell
from runner.execute.local import LocalExecutor, cpu_slots
from runner.execute.ray_pool import RayExecutor
from runner.execute.report_channel import LocalChannel
from runner.store.records import RunRecord

# Cells of one batch key run together in process while Ray starts: a quarter of the pool's default
# batch keeps most of batching's gain and bounds what the driver still owes when the actors are ready.
WARM_MAX_BATCH = 16

WATCH_S = 0.1  # how often the watcher of a deferred start checks its forecast


def ray_pays(
    left: int, item_s: float, run_s: float, workers: int, cost_s: float, cpu_s: float = 0.0, cpus: int = 1
) -> bool:
    """Whether `left` items are worth moving to `workers` Ray actors. In process an item costs `item_s`,
    of which `run_s` is its run and the rest the driver's own work around it (a tuner's ask and tell).
    On Ray, at best, the runs are divided among the workers and overlap the driver's part, which is not
    divided: an item costs the larger of the two. What that saves must exceed Ray's cost. (With runs at
    once in threads, `run_s` is what a run takes alone, `_Pace`: the driver's part is then what the
    interval leaves of it, none where the threads overlap the runs as Ray would.)

    The embedded Ray's actors compute on the driver's machine: all an item costs in CPU (`cpu_s`, its run
    and the driver's work around it, as this process spent it) is still spent on its `cpus`, so on Ray
    an item takes at least `cpu_s / cpus`. Without that bound, runs already at once in threads on every
    core looked as if Ray could divide them again: a 600-trial study of a 30 ms run on 2 cores moved to
    Ray and took 23.6 s, 15.3 s in process (docs/performance_log.md, ninth session)."""
    on_ray = max(item_s - run_s, run_s / workers, cpu_s / max(1, cpus))
    return left * (item_s - on_ray) > cost_s


class Starter(Protocol):
    """A start under way (cluster.background.BackgroundStart): `ready` once it is through or failed."""

    ready: threading.Event

    def check(self) -> None: ...

    def wait(self) -> None: ...


def background_start(then: Callable[[], None]) -> Starter:
    from cluster.background import BackgroundStart

    return BackgroundStart(then)


class _Pace:
    """How long an item takes in process, from its records: the mean interval between their arrivals
    (the driver's own work around each run included) and the mean of their runs' `wall_s`, trusted once
    they cover `TRUSTED` items or a second. Means start at the first record: the first run carries
    first-call costs.

    With runs at once in threads (`at_once` > 1) a run's `wall_s` is not what it would take alone: two
    runs of a learner that computes in Python each take twice as long, waiting for the GIL, and overlap
    nothing. A run alone on a free core takes its CPU time (of the thread that ran it, as the in-process
    executor counts it), which stands for the run there: runs that overlap in threads then leave no
    driver's part to the interval (nothing for Ray to divide further), runs that wait for the GIL do.
    This process's CPU time per item (every thread's: runs, asks, tells, commits) bounds what the
    embedded Ray could reach on the same cores (`ray_pays`)."""

    TRUSTED = 4

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, process_cpu: Callable[[], float] = time.process_time
    ) -> None:
        self.clock, self.process_cpu = clock, process_cpu
        self.at_once = 1  # runs at once in process (threads), as the in-process executor reports
        self.began = clock()
        self.first: float | None = None
        self.last = self.began
        self.items = 0  # records after the first arrival, the sum of their runs' seconds, and their CPU seconds
        self.run_s = 0.0
        self.cpu_at_first = self.cpu_s = 0.0
        self.process_at_first = self.process_s = 0.0  # this process's CPU seconds (every thread's)

    def arrived(self, records: list[RunRecord], cpu_s: float = 0.0) -> None:
        """Records arrived, when the in-process executor's runs had taken `cpu_s` CPU seconds in all."""
        self.last, self.cpu_s, self.process_s = self.clock(), cpu_s, self.process_cpu()
        if self.first is None:
            self.first, self.cpu_at_first, self.process_at_first = self.last, cpu_s, self.process_s
            return
        self.items += len(records)
        self.run_s += sum(float(r.row.get("wall_s") or 0.0) for r in records)

    def means(self) -> tuple[float, float, float] | None:
        """(seconds an item takes in process, seconds its run would take alone, CPU seconds this process
        spends on an item), None until trusted."""
        if self.first is None or not self.items:
            return None
        span = self.last - self.first
        if self.items < self.TRUSTED and span < 1.0:
            return None
        cpu = (self.process_s - self.process_at_first) / self.items
        if self.at_once > 1:
            return span / self.items, (self.cpu_s - self.cpu_at_first) / self.items, cpu
        return span / self.items, self.run_s / self.items, cpu

    def since_last_s(self) -> float:
        """How long the item under way has run (since the last record; before any, since the start)."""
        return self.clock() - self.last


class _UntilReady:
    """The items of `source` for as long as `ready` is not set; asked before every pull, so that no item
    is taken from the source and then left behind. `ended`: the source itself ran out."""

    def __init__(self, source: Iterator[WorkItem | list[WorkItem] | None], ready: Callable[[], bool]) -> None:
        self.source, self.ready = source, ready
        self.ended = False

    def __iter__(self) -> Iterator[WorkItem | list[WorkItem] | None]:
        while not self.ready():
            try:
                yield next(self.source)
            except StopIteration:
                self.ended = True
                return


class WarmChannel:
    """The report channel of a warm start: runs in this process call the judge directly (`local`),
    runs on the pool report through the pool's own channel, made when the runs move to Ray (`on_ray`)."""

    def __init__(self, pool: RayExecutor, judge: Judge, spec: ReportSpec) -> None:
        self.pool, self.judge, self.spec = pool, judge, spec
        self.local = LocalChannel(judge, spec)
        self._on_ray: ReportChannel | None = None

    @property
    def reporters(self) -> ReporterFactory:
        return self.local.reporters

    def on_ray(self) -> ReportChannel:
        if self._on_ray is None:
            self._on_ray = self.pool.report_channel(self.judge, self.spec)
        return self._on_ray

    @contextmanager
    def batch(self) -> Iterator[None]:
        yield  # the pool's channel opens its own batch around the runs on Ray (WarmStartExecutor.execute)

    def close(self) -> None:
        if self._on_ray is not None:
            self._on_ray.close()


@dataclass
class WarmStartExecutor:
    """A Ray pool on the embedded Ray, and cells run in process until it is up."""

    pool: RayExecutor
    starter: Callable[[Callable[[], None]], Starter] = background_start
    name: str = "warm"
    ran_locally: int = field(default=0, init=False)  # records of cells run in process while Ray started
    cost_s: float = 5.0  # start, actors' imports and teardown of the embedded Ray (CONVGRID_RAY_COST_S)
    _left: Callable[[], int] | None = field(default=None, init=False, repr=False)  # see expect_items
    _start: Starter | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _warmed: bool = field(default=False, init=False)  # the pool's actors all answered, and close did not come first
    _abandoned: bool = field(default=False, init=False)  # closed before the pool was warm

    def start(self) -> None:
        """Start Ray and the pool in the background; return at once (not once closed)."""
        with self._lock:
            if self._start is None and not self._abandoned:
                self._start = self.starter(self._warm)

    def expect_items(self, left: Callable[[], int] | None) -> None:
        """How many items are still to come, asked as the work goes on: while set, `execute` defers
        Ray's start until `ray_pays` (see the module's docstring); None starts Ray at once again."""
        self._left = left

    def expect_total(self, items: int) -> None:
        """A grid's `items` in all: Ray's start is deferred as a study's is, until the runs timed in process
        say it pays for the items still to come (`items` less those run here)."""
        self.expect_items(lambda: max(items - self.ran_locally, 0))

    def _workers(self) -> int:
        if self.pool.workers is not None:
            return self.pool.workers
        return max(1, (os.cpu_count() or 1) // self.pool.threads)  # what the embedded pool will make

    def _watch(self, pace: _Pace, stop: threading.Event) -> None:
        """The deferred start's watcher thread: start Ray once the forecast says it pays."""
        left, workers, cpus = self._left, self._workers(), cpu_slots()
        while left is not None and not stop.wait(WATCH_S):
            # the items left at the pace timed so far, or the item under way alone: one run that has
            # taken longer already than Ray's cost over its workers is long work (a first run too)
            since = pace.since_last_s()
            means = pace.means()
            pays = ray_pays(1, since, since, workers, self.cost_s)
            if not pays and means is not None:
                item_s, run_s, cpu_s = means
                pays = ray_pays(left(), item_s, run_s, workers, self.cost_s, cpu_s, cpus)
            if pays:
                self.start()
                return

    def _warm(self) -> None:
        """In the starter's thread: make the actors and wait until each has answered (imported the
        tasks), unless closed meanwhile; the start closed first stops what it made."""
        self.pool.start()
        if not self._abandoned:
            self.pool.worker_pids()
        with self._lock:
            if not self._abandoned:
                self._warmed = True
                return
        self.pool.close()

    def _local(self) -> LocalExecutor:
        # Smaller batches than the pool's: a batch under way here when Ray comes up is finished here first.
        # As many runs at once as the pool will have workers (threads, for a thread-safe learner).
        batch = min(self.pool.max_batch, WARM_MAX_BATCH)
        return LocalExecutor(self.pool.threads, batch=self.pool.batch, max_batch=batch, workers=self._workers())

    def _ray(self) -> RayExecutor:
        self.start()
        assert self._start is not None
        self._start.wait()
        return self.pool

    def execute(
        self, items: WorkSource, channel: ReportChannel | None = None, doorbell: Doorbell | None = None
    ) -> Iterator[list[RunRecord]]:
        """See `Executor.execute`; the doorbell is heard while the cells run in this process."""
        if channel is not None and not isinstance(channel, WarmChannel):  # a channel only the pool can serve
            yield from self._ray().execute(items, channel)
            return
        source = iter(items)
        if self._left is None or self._start is not None:
            self.start()
            assert self._start is not None
            if not self._start.ready.is_set():
                ended = yield from self._in_process(source, self._start.ready.is_set, channel, doorbell)
                if ended:
                    return  # all done before Ray was up: never wait for it
        else:
            import runner.execute.worker  # noqa: F401 - the tasks' imports (torch) are not a run's pace

            pace, stop = _Pace(), threading.Event()
            watcher = threading.Thread(target=self._watch, args=(pace, stop), name="convgrid-ray-forecast", daemon=True)
            watcher.start()
            try:
                ended = yield from self._in_process(source, self._up, channel, doorbell, pace)
            finally:
                stop.set()
                watcher.join()
            if ended:
                return  # the work ended before it paid to start Ray, or before Ray was up
        pool = self._ray()  # what the in-process phase left of the source goes there
        if channel is None:
            yield from pool.execute(source)
            return
        on_ray = channel.on_ray()
        with on_ray.batch():
            yield from pool.execute(source, on_ray)

    def _up(self) -> bool:
        return self._start is not None and self._start.ready.is_set()

    def _in_process(
        self,
        source: Iterator[WorkItem | list[WorkItem] | None],
        ready: Callable[[], bool],
        channel: ReportChannel | None,
        doorbell: Doorbell | None,
        pace: _Pace | None = None,
    ) -> Generator[list[RunRecord], None, bool]:
        """Run the source here until `ready()`; returns whether the source ended meanwhile."""
        gate = _UntilReady(source, ready)
        local = channel.local if isinstance(channel, WarmChannel) else None
        executor = self._local()
        for records in executor.execute(gate, local, doorbell):
            self.ran_locally += len(records)
            if pace is not None and records:
                pace.at_once = executor.at_once(r.task for r in records)
                pace.arrived(records, executor.cpu_s)
            yield records
        return gate.ended

    def report_channel(self, judge: Judge, spec: ReportSpec) -> ReportChannel:
        return WarmChannel(self.pool, judge, spec)

    def close(self) -> None:
        with self._lock:
            if not self._warmed:
                self._abandoned = True  # the start goes on in its thread and stops what it made (_warm)
                return
        self.pool.close()
