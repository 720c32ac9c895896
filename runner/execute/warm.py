"""Work starts before Ray is up: the embedded Ray pool, with cells run in this process while Ray starts.

Starting the embedded Ray and letting its actors import torch takes seconds, during which the driver
would only wait. `WarmStartExecutor` starts Ray in a thread of its own (cluster.background) and
meanwhile runs the cells of the same lazy source here, through the in-process executor's code path with
the actors' thread count. Once every actor has answered, the rest of the source goes to the Ray pool.
Both phases yield their records to the one caller, so flushes, commits, claims (runner.execute.waves),
progress and resume see a single stream, and each item is run once: a batch being run here when Ray
comes up finishes here, the items after it go to Ray. A source that ends before Ray is up never waits
for it: `close` leaves the start to finish in its thread and stop the actors it made, and a process
that exits meanwhile takes the half-started Ray with it.

A tuner's pruner follows its runs through `WarmChannel`: the judge is called directly by the runs in
this process, and through the pool's channel actor (made once Ray is up) by the runs on Ray, so a
study with a pruner starts at once too.

Only for the embedded Ray, without hard timeouts and GPU actors (`runner.api.make_executor` decides):
a run here cannot be killed past its deadline, and it computes on the driver's CPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

from runner.execute.base import Judge, ReportChannel, ReporterFactory, ReportSpec, WorkItem, WorkSource
from runner.execute.local import LocalExecutor
from runner.execute.ray_pool import RayExecutor
from runner.execute.report_channel import LocalChannel
from runner.store.records import RunRecord

# Cells of one batch key run together in process while Ray starts: a quarter of the pool's default
# batch keeps most of batching's gain and bounds what the driver still owes when the actors are ready.
WARM_MAX_BATCH = 16


class Starter(Protocol):
    """A start under way (cluster.background.BackgroundStart): `ready` once it is through or failed."""

    ready: threading.Event

    def check(self) -> None: ...

    def wait(self) -> None: ...


def background_start(then: Callable[[], None]) -> Starter:
    from cluster.background import BackgroundStart

    return BackgroundStart(then)


class _UntilReady:
    """The items of `source` for as long as `ready` is not set; asked before every pull, so that no item
    is taken from the source and then left behind. `ended`: the source itself ran out."""

    def __init__(self, source: Iterator[WorkItem | list[WorkItem] | None], ready: threading.Event) -> None:
        self.source, self.ready = source, ready
        self.ended = False

    def __iter__(self) -> Iterator[WorkItem | list[WorkItem] | None]:
        while not self.ready.is_set():
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
    _start: Starter | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _warmed: bool = field(default=False, init=False)  # the pool's actors all answered, and close did not come first
    _abandoned: bool = field(default=False, init=False)  # closed before the pool was warm

    def start(self) -> None:
        """Start Ray and the pool in the background; return at once."""
        if self._start is None:
            self._start = self.starter(self._warm)

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
        batch = min(self.pool.max_batch, WARM_MAX_BATCH)
        return LocalExecutor(threads=self.pool.threads, batch=self.pool.batch, max_batch=batch)

    def _ray(self) -> RayExecutor:
        self.start()
        assert self._start is not None
        self._start.wait()
        return self.pool

    def execute(self, items: WorkSource, channel: ReportChannel | None = None) -> Iterator[list[RunRecord]]:
        if channel is not None and not isinstance(channel, WarmChannel):  # a channel only the pool can serve
            yield from self._ray().execute(items, channel)
            return
        self.start()
        assert self._start is not None
        source = iter(items)
        if not self._start.ready.is_set():
            gate = _UntilReady(source, self._start.ready)
            for records in self._local().execute(gate, channel.local if channel is not None else None):
                self.ran_locally += len(records)
                yield records
            if gate.ended:
                return  # all done before Ray was up: never wait for it
        pool = self._ray()  # what the in-process phase left of the source goes there
        if channel is None:
            yield from pool.execute(source)
            return
        on_ray = channel.on_ray()
        with on_ray.batch():
            yield from pool.execute(source, on_ray)

    def report_channel(self, judge: Judge, spec: ReportSpec) -> ReportChannel:
        return WarmChannel(self.pool, judge, spec)

    def close(self) -> None:
        with self._lock:
            if not self._warmed:
                self._abandoned = True  # the start goes on in its thread and stops what it made (_warm)
                return
        self.pool.close()
