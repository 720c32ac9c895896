"""Executors: where cells run. Both yield finished records chunk by chunk, in completion order.

LocalExecutor runs everything in this process (debuggable: breakpoints and tracebacks work).
RayExecutor keeps long-lived actors (one per CPU slot, or per GPU share) and feeds them chunks of
cells sized from measured run times, so tiny tasks do not pay one Ray call each, with a bounded
number of chunks in flight per actor. A chunk lost with its actor is queued again.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from runner.worker import RunRecord, WorkItem, configure_threads, run_item


class Executor(Protocol):
    name: str

    def execute(self, items: Sequence[WorkItem]) -> Iterator[list[RunRecord]]: ...

    def close(self) -> None: ...


@dataclass
class LocalExecutor:
    """Runs cells one by one in the calling process."""

    threads: int = 1
    timeout_s: float | None = None
    name: str = "local"

    def execute(self, items: Sequence[WorkItem]) -> Iterator[list[RunRecord]]:
        configure_threads(self.threads)
        for item in items:
            yield [run_item(item, threads=self.threads, timeout_s=self.timeout_s)]

    def close(self) -> None:
        pass


class ChunkSizer:
    """Chunk sizes from measured per-run seconds: aim at `target_s` of work per chunk, but never so big
    that the last chunks leave actors idle (at most the remaining work split over all actors)."""

    def __init__(self, target_s: float = 2.0, max_chunk: int = 1024) -> None:
        self.target_s = target_s
        self.max_chunk = max_chunk
        self.total_s = 0.0
        self.count = 0

    def observe(self, records: Sequence[RunRecord]) -> None:
        self.total_s += sum(float(r.row.get("wall_s") or 0.0) for r in records)
        self.count += len(records)

    def size(self, remaining: int, actors: int) -> int:
        if self.count == 0:
            return 1  # measure first
        per_run = max(self.total_s / self.count, 1e-6)
        fair = max(1, math.ceil(remaining / actors))
        return max(1, min(self.max_chunk, int(self.target_s / per_run), fair))


class _Actor:
    """Body of the Ray actor; wrapped with ray.remote at start so that ray is imported lazily."""

    def __init__(self, threads: int, device: str) -> None:
        configure_threads(threads)
        self.threads = threads
        self.device = device

    def pid(self) -> int:
        import os

        return os.getpid()

    def run_chunk(self, items: list[WorkItem], timeout_s: float | None) -> list[RunRecord]:
        return [run_item(i, device=self.device, threads=self.threads, timeout_s=timeout_s) for i in items]


@dataclass
class RayExecutor:
    """An actor pool on an embedded or existing Ray cluster."""

    address: str | None = None
    workers: int | None = None
    threads: int = 1
    gpus_per_worker: float = 0.0
    timeout_s: float | None = None
    target_chunk_s: float = 2.0
    in_flight_per_worker: int = 2
    name: str = "ray"
    actors: list[Any] = field(default_factory=list, init=False)
    chunks_submitted: int = field(default=0, init=False)
    chunks_resubmitted: int = field(default=0, init=False)

    def start(self) -> None:
        if self.actors:
            return
        from cluster import connect

        ray = connect(self.address)
        n = self.workers
        if n is None:
            resources = ray.cluster_resources()
            n = int(resources.get("GPU", 0) / self.gpus_per_worker) if self.gpus_per_worker else int(resources.get("CPU", 1) // self.threads)
        device = "cuda" if self.gpus_per_worker else "cpu"
        remote = ray.remote(max_restarts=-1, max_task_retries=0)(_Actor)
        opts = {"num_cpus": self.threads, "num_gpus": self.gpus_per_worker}
        self.actors = [remote.options(**opts).remote(self.threads, device) for _ in range(max(1, n))]

    def execute(self, items: Sequence[WorkItem]) -> Iterator[list[RunRecord]]:
        import ray
        from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, WorkerCrashedError

        self.start()
        queue: deque[WorkItem] = deque(items)
        sizer = ChunkSizer(self.target_chunk_s)
        pending: dict[Any, tuple[int, list[WorkItem]]] = {}
        load = [0] * len(self.actors)
        lost = (RayActorError, ActorDiedError, ActorUnavailableError, WorkerCrashedError)
        while queue or pending:
            for idx in sorted(range(len(self.actors)), key=load.__getitem__):
                while queue and load[idx] < self.in_flight_per_worker:
                    n = sizer.size(len(queue), len(self.actors))
                    chunk = [queue.popleft() for _ in range(min(n, len(queue)))]
                    ref = self.actors[idx].run_chunk.remote(chunk, self.timeout_s)
                    pending[ref] = (idx, chunk)
                    load[idx] += 1
                    self.chunks_submitted += 1
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                idx, chunk = pending.pop(ref)
                load[idx] -= 1
                try:
                    records = ray.get(ref)
                except lost:
                    # The actor died with the chunk (killed worker, lost node). Ray restarts the actor;
                    # the chunk goes back to the front of the queue, so nothing is lost or doubled.
                    queue.extendleft(reversed(chunk))
                    self.chunks_resubmitted += 1
                    time.sleep(0.05)
                    continue
                sizer.observe(records)
                yield records

    def worker_pids(self) -> list[int]:
        import ray

        self.start()
        return ray.get([a.pid.remote() for a in self.actors])

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
