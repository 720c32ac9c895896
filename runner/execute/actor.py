"""The long-lived Ray actor that runs chunks of cells.

Imported only after `cluster.connect` has set Ray's environment (this module imports ray).
`run_chunk` runs in the actor's default group (one at a time, in order); `current` and `pid` run in a
separate control group, so the driver can ask what a busy actor is doing (for the hard timeout)
without waiting for its chunk to finish.

Each actor is named for people by its `__repr__`, which Ray intends for that: the dashboard shows it
in the actors table ("Repr"), names the actor's calls after it in the tasks table
("convgrid fig2_depth #0 cpu.run_chunk") and prefixes the actor's log lines with it. A Ray *name*
(`.options(name=...)`) is something else: a handle to look an actor up by, which must be unique in its
namespace (two pools of one grid in one driver would collide) and is not needed here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import ray

from runner.execute import provenance, run_output
from runner.execute.base import BatchPolicy, ReporterFactory, WorkItem
from runner.execute.checkpointing import PREEMPT, preempt_on_sigterm
from runner.execute.live_output import LiveFiles
from runner.execute.staging import Stager, StagingTarget, answer_probe, open_target
from runner.execute.worker import claim_device, configure_threads, run_items
from runner.fs.root import Root
from runner.store.records import RunRecord
from tasks.status import PREEMPTED


class _ChunkActor:
    def __init__(
        self,
        threads: int,
        device: str,
        gpu_fraction: float | None = None,
        label: str = "convgrid",
        code: provenance.Shipped | None = None,
        preempt_grace_s: float = 30.0,
    ) -> None:
        self.label = label
        # SIGTERM (a node drained, a spot instance reclaimed): the runs here save their state and stop, the
        # driver hands them to other workers, and this process exits once idle (at most the grace later)
        preempt_on_sigterm(preempt_grace_s, lambda: self._current is None)
        provenance.adopt(code)  # the driver's code version, where this process runs the driver's files
        configure_threads(threads)
        self.threads = threads
        self.device = claim_device(device, gpu_fraction)
        self._lock = threading.Lock()
        self._current: tuple[tuple[str, ...], float] | None = None
        self._roots: dict[str, Root] = {}  # results roots this actor stages to, opened once

    def __repr__(self) -> str:
        # Defined on this class itself: Ray 2.60 uses a repr only when the actor's class defines one.
        return self.label

    def run_chunk(
        self,
        items: list[WorkItem],
        timeout_s: float | None,
        reporters: ReporterFactory | None = None,
        policy: BatchPolicy | None = None,
        staging: StagingTarget | None = None,
    ) -> Iterator[list[RunRecord]]:
        """A Ray streaming generator of lists of records: each record reaches the driver as its run (or
        its batch) finishes, not when the chunk does, so a driver killed mid-chunk has already flushed
        what finished. With `staging` (and this actor on one of its nodes) the curves are written to
        the results root here and the records sent carry the staged part's name instead
        (runner.execute.staging: a record may then be held a moment, to share a part)."""
        stager = self._stager(staging)
        if stager is None:  # a node the root is not reachable from: checkpoints would land on its own disk
            items = [dataclasses.replace(i, checkpoints=None) if i.checkpoints else i for i in items]
        # where it stages, a run's output is also written there as it grows: a death keeps it (live_output)
        files = LiveFiles(stager.files, stager.target.folder) if stager is not None else None
        with run_output.live(files, files.ended) if files is not None else contextlib.nullcontext():
            for record in run_items(
                items,
                device=self.device,
                threads=self.threads,
                timeout_s=timeout_s,
                reporters=reporters,
                policy=policy,
                on_start=self._started,
            ):
                # a preempted run is never stored: its record goes to the driver as it is, to be handed out again
                ready = [record] if stager is None or record.status == PREEMPTED else stager.offer(record)
                if ready:
                    yield ready
        if stager is not None and (rest := stager.drain()):
            yield rest
        with self._lock:
            self._current = None

    def _stager(self, staging: StagingTarget | None) -> Stager | None:
        if staging is None or ray.get_runtime_context().get_node_id() not in staging.nodes:
            return None  # a node the driver's probe did not find the root on (restarted elsewhere)
        if staging.root not in self._roots:
            self._roots[staging.root] = open_target(staging.root)
        return Stager(staging, self._roots[staging.root])

    def _started(self, group: Sequence[WorkItem]) -> None:
        # A batch runs (and overruns its deadline) as one: the hard timeout kills it as one.
        with self._lock:
            self._current = (tuple(i.run_id for i in group), time.monotonic())

    @ray.method(concurrency_group="control")
    def current(self) -> tuple[tuple[str, ...], float] | None:
        """(run ids, seconds they have been running) of the run or batch in progress, or None when idle."""
        with self._lock:
            if self._current is None:
                return None
            run_ids, t0 = self._current
            return run_ids, time.monotonic() - t0

    @ray.method(concurrency_group="control")
    def output(self, run_ids: list[str]) -> dict[str, str]:
        """The output so far of those of `run_ids` computing here (the hard timeout asks before it kills)."""
        return {r: text for r in run_ids if (text := run_output.snapshot(r)) is not None}

    @ray.method(concurrency_group="control")
    def preempt(self) -> None:
        """The driver is being preempted: runs here save their state and stop, queued ones do not start."""
        PREEMPT.set()

    @ray.method(concurrency_group="control")
    def pid(self) -> int:
        return os.getpid()

    @ray.method(concurrency_group="control")
    def answer_probe(self, root: str, probe: str, reply: str) -> bool:
        """Whether this node reads the driver's probe under the results root and writes a reply there
        (runner.execute.staging.probe_nodes)."""
        return answer_probe(root, probe, reply, ray.get_runtime_context().get_node_id())

    @ray.method(concurrency_group="control")
    def placement(self) -> tuple[str, str]:
        """(Ray node id, device the runs compute on) of this actor."""
        return ray.get_runtime_context().get_node_id(), self.device


# Applied as a call, not a decorator, so that type checkers see the plain class above and the actor
# handle factory below as what they are (Ray's own stubs do not describe decorated actor classes).
_OPTIONS: dict[str, Any] = {"max_restarts": -1, "max_task_retries": 0, "concurrency_groups": {"control": 1}}
ChunkActor: Any = ray.remote(**_OPTIONS)(_ChunkActor)
