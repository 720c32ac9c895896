"""A long run's small parts merged on a worker's node while it runs (issue 27; docs/scale.md).

Where workers stage their curves (runner.execute.staging), a run of long curves adds a part to its
task's curves/ a run, and every flush lists the folders it writes: 11-16 us a part (benchmarks/
ingest_sim.py parts), so a flush slows as the folder fills, until the merge after the run. So the
driver's commits (`MergeCadence`, a Flusher listener) ask, at most every `MERGE_EVERY_S`, for the
bounded merge of runner.store.merge on a node whose workers reach the root (`WorkerMerges`, the Ray
pool's): it takes the store's writers' lock there (flock locally, the lease lock on an object store),
one transaction per group, and the merged bytes never pass through the driver. One at a time, nodes in
turn; one that fails changed nothing and the next tries again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from runner.execute.staging import worker_root
from runner.store.records import RunRecord

# How often, at most, a driver whose workers stage has the store's fragmented folders merged on a worker.
MERGE_EVERY_S = 30.0


@runtime_checkable
class MergesOnWorkers(Protocol):
    """An executor that can merge the store's small parts on one of its workers' nodes."""

    def merge_on_worker(self, root: str, max_parts: int) -> bool:
        """Start merging the small parts of every folder of `root` holding more than `max_parts`
        (runner.store.merge) on a node whose workers stage; False where none does, or while the last
        one still runs."""
        ...


class MergeCadence:
    """A Flusher's commit listener: at most every `every_s`, the folders past `max_parts` parts are merged
    on a worker (`MergesOnWorkers`). Nothing where the executor cannot, or `max_parts` is 0
    (CONVGRID_COMPACT_PARTS). The merge after the run stays as it was."""

    def __init__(
        self,
        executor: object,
        root: str,
        base: str,
        max_parts: int,
        every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.executor, self.root, self.max_parts = executor, worker_root(root, base), max_parts
        self.every_s, self.clock = MERGE_EVERY_S if every_s is None else every_s, clock
        self._last = clock()

    def __call__(self, _records: Sequence[RunRecord]) -> None:
        if self.max_parts <= 0 or not isinstance(self.executor, MergesOnWorkers):
            return
        now = self.clock()
        if now - self._last >= self.every_s and self.executor.merge_on_worker(self.root, self.max_parts):
            self._last = now


def merge_here(root: str, max_parts: int) -> str:
    """What a worker runs: runner.store.merge on the root as this node sees it, under the store's
    writers' lock. Returns its report line."""
    from runner.store import ResultStore
    from runner.store.merge import merge_parts

    return merge_parts(ResultStore(root), max_parts).line()


class WorkerMerges:
    """The driver's side of the merges on workers: the one under way, and the reports of those done."""

    def __init__(self) -> None:
        self.reports: list[str] = []
        self._under_way: Any = None  # an ObjectRef
        self._task: Any = None  # `merge_here` as a Ray task, made once Ray is connected

    def ask(self, nodes: frozenset[str], root: str, max_parts: int) -> bool:
        """Start a merge on one of `nodes` (in turn); False while the last one still runs."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._under_way is not None:
            if not ray.wait([self._under_way], timeout=0)[0]:
                return False
            self._collect()
        if self._task is None:
            # no CPU reserved: every slot is an actor's, and a merge mostly reads and writes; one that dies
            # is safe (one transaction per group), so it is not retried
            self._task = ray.remote(num_cpus=0, max_retries=0)(merge_here)
        chosen = sorted(nodes)[len(self.reports) % len(nodes)]
        # hard: only a node the staging probe saw reach the root; one gone meanwhile fails this merge
        # (collected as failed), and the next asks the next node
        where = NodeAffinitySchedulingStrategy(chosen, soft=False)
        self._under_way = self._task.options(scheduling_strategy=where).remote(root, max_parts)
        return True

    def wait(self, timeout_s: float) -> None:
        """Wait up to `timeout_s` for the merge under way and collect it; one still running then is
        killed (`ray.cancel(force=True)`; a plain cancel did not stop a running one, Ray 2.60) and
        forgotten: a command's end never waits on a merge for longer than `timeout_s`. A merge that
        dies is safe: one transaction per group, so what it merged stays and the group under way is
        uncommitted; its writers' lock is freed with its process (a flock), or taken over at once on
        this host, after a lease on another (the lease lock)."""
        import ray

        if self._under_way is None:
            return
        if ray.wait([self._under_way], timeout=timeout_s)[0]:
            self._collect()
            return
        ray.cancel(self._under_way, force=True)
        self._under_way = None

    def _collect(self) -> None:
        import ray

        from runner.errors import redact

        ref, self._under_way = self._under_way, None
        try:
            self.reports.append(ray.get(ref))
        except Exception as exc:  # noqa: BLE001 - a merge that failed changed nothing; the next tries again
            first = str(exc).splitlines()[0] if str(exc) else ""
            self.reports.append(redact(f"merge failed: {type(exc).__name__}: {first}"))
