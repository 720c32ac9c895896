"""Running cells and persisting what comes back: the executor's stream of finished records goes to a
`Flusher`, which writes them on the flush policy (a part every N runs or T seconds) through one writer
thread (runner.store.group_commit), so the fsyncs of one commit overlap the next runs and flushes that
wait share a commit. A crash loses at most one flush window plus the commit under way; Ctrl-C keeps
what finished. A record the store refuses is stored as `failed` with the reason
(runner.execute.unwritable) and recounted. When the store itself cannot be written (a full disk, a
read-only root: runner.errors.StoreIOError), no run is stored as failed: the commit is tried again
after a pause (`STORE_RETRY_S`: a disk freed meanwhile loses nothing), then the command stops with one
message, and the runs it could not store run again with the next command.

An executor whose workers can write to the results root is told so first (runner.execute.staging):
their records then bring the name of a staged part instead of curve rows, and once everything is
committed what is left in the session's folder (parts of workers that died before their manifest came)
is deleted.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from contextlib import contextmanager
from types import TracebackType

import numpy as np

from runner.coord.claims import Claims
from runner.errors import StoreIOError
from runner.execute.base import CheckpointTarget, Executor, ReportChannel, WorkItem
from runner.execute.checkpointing import PREEMPT, preemptible
from runner.execute.doorbell import Doorbell
from runner.execute.options import ExecutionOptions, FlushPolicy
from runner.execute.progress import Progress, Resumes
from runner.execute.staging import stage_results
from runner.execute.unwritable import write_isolated
from runner.execute.waves import WaveSource
from runner.execute.worker_merge import MergeCadence
from runner.grid.cells import Cell, CellSource
from runner.grid.schema import task_schemas
from runner.run.plan import plan_grid
from runner.settings import settings
from runner.store import ResultStore, RunRecord, incoming
from runner.store.checkpoints import CheckpointStore
from runner.store.group_commit import GroupCommit
from tasks.status import PREEMPTED

Refused = tuple[str, RunRecord]  # (status a record arrived with, the failed record stored instead)
STORE_RETRY_S = (1.0, 2.0, 4.0, 8.0, 15.0)  # pauses before trying a commit the store's I/O refused again


class StoreRetryWarning(UserWarning):
    """The store could not be written; the commit is tried again after a pause."""


class Flusher:
    """Buffers finished records and commits them on `policy`; counts them on `bar` as they arrive, and
    again where the store refused one. `on_commit(listener)`: told of every record once committed.
    Use as a context manager: leaving commits everything (also on Ctrl-C)."""

    def __init__(
        self,
        store: ResultStore,
        policy: FlushPolicy,
        bar: Progress,
        clock: Callable[[], float] = time.monotonic,
        retry_s: Sequence[float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.store, self.policy, self.bar, self.clock = store, policy, bar, clock
        self.retry_s = STORE_RETRY_S if retry_s is None else retry_s
        self.sleep = sleep
        self._buffer: list[RunRecord] = []
        self._last = clock()
        self._listeners: list[Callable[[Sequence[RunRecord]], None]] = []
        self._writer: GroupCommit[RunRecord, Refused] = GroupCommit(self._commit)

    def on_commit(self, listener: Callable[[Sequence[RunRecord]], None]) -> None:
        self._listeners.append(listener)

    def add(self, records: Sequence[RunRecord]) -> None:
        self._buffer.extend(records)
        self.bar.resumes.add([r.row for r in records])
        self.bar.update([r.status for r in records])
        if len(self._buffer) >= self.policy.every or self.clock() - self._last >= self.policy.seconds:
            self.flush()

    def flush(self) -> None:
        """Hand what is buffered to the writer thread (returns at once)."""
        if self._buffer:
            self._writer.submit(list(self._buffer))
            self._buffer.clear()
        self._last = self.clock()

    def settle(self) -> None:
        """Flush and wait until everything is committed."""
        self.flush()
        self._recount(self._writer.drain())

    @property
    def counts(self) -> Counter[str]:
        return self.bar.counts

    def _commit(self, records: Sequence[RunRecord]) -> list[Refused]:
        arrived = {r.run_id: r.status for r in records}
        for pause in [*self.retry_s, None]:
            try:
                stored = write_isolated(self.store, records, task_schemas)
                break
            except StoreIOError as exc:
                if pause is None:
                    raise
                warnings.warn(f"convgrid: {exc.cause}; trying again in {pause:g} s", StoreRetryWarning, stacklevel=2)
                self.sleep(pause)
        refused = [(arrived[f.run_id], f) for f in stored]
        for listener in self._listeners:
            listener(records)
        return refused

    def _recount(self, refused: list[Refused]) -> None:
        for was, failed in refused:
            self.bar.counts[was] -= 1  # counted as it arrived; stored as failed (the store refused it)
            self.bar.counts[failed.status] += 1

    def __enter__(self) -> Flusher:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.flush()
        try:
            self._recount(self._writer.close())
        finally:
            self.bar.close()


@contextmanager
def staged_by_workers(executor: Executor, store: ResultStore) -> Iterator[None]:
    """Around persisting an executor's records: its workers stage their curves where they can reach the
    root, and the session's leftovers are deleted afterwards (under the writers' lock, after committed
    markers are applied; a store that cannot be written now leaves them to the next sweep)."""
    folder = stage_results(executor, store.root, store.base)
    try:
        yield
    finally:
        if folder is not None:
            try:
                with store.writing():
                    incoming.discard(store.files, folder)
            except OSError as exc:
                warnings.warn(f"convgrid: staged parts left in {folder} for a later sweep: {exc}", stacklevel=3)


def work_item(cell: Cell, checkpoints: CheckpointTarget | None = None) -> WorkItem:
    return WorkItem(cell.run_id, cell.task, cell.params_json(), checkpoints)


def work_items(
    cells: Iterable[Cell | list[Cell] | None], checkpoints: CheckpointTarget | None = None
) -> Iterator[WorkItem | list[WorkItem] | None]:
    """Cells as the executor's lazy source (a group stays a group; None, "nothing yet", passes through)."""
    for c in cells:
        if c is None:
            yield None
        else:
            yield [work_item(x, checkpoints) for x in c] if isinstance(c, list) else work_item(c, checkpoints)


class Resubmit:
    """The executor's source around the work items: a run that comes back `preempted` (its worker was
    told to stop, and it saved its state) is not stored; it is handed out again, to resume on another
    worker, unless this driver is being preempted itself (runner.execute.checkpointing.PREEMPT): then
    nothing more starts, and the source ends once the runs in flight are back."""

    def __init__(self, items: Iterator[WorkItem | list[WorkItem] | None], resumes: Resumes) -> None:
        self.items, self.resumes = items, resumes
        self.again: deque[WorkItem] = deque()
        self.in_flight: dict[str, WorkItem] = {}
        self.ended = False

    def __iter__(self) -> Iterator[WorkItem | list[WorkItem] | None]:
        while not PREEMPT.is_set():
            if self.again:
                item = self.again.popleft()
                self.in_flight[item.run_id] = item
                yield item
            elif not self.ended:
                try:
                    nxt = next(self.items)
                except StopIteration:
                    self.ended = True
                    continue
                for item in nxt if isinstance(nxt, list) else [] if nxt is None else [nxt]:
                    self.in_flight[item.run_id] = item
                yield nxt
            elif self.in_flight:
                yield None  # runs still out may come back preempted: wait for them
            else:
                return

    def arrived(self, records: Sequence[RunRecord]) -> list[RunRecord]:
        """The records to store: all but the preempted ones, which go out again."""
        kept = []
        for record in records:
            item = self.in_flight.pop(record.run_id, None)
            if record.status != PREEMPTED:
                kept.append(record)
            elif item is not None and not PREEMPT.is_set():
                self.again.append(item)
            else:
                self.resumes.preempted += 1
        return kept


def discard_checkpoints(store: ResultStore) -> Callable[[Sequence[RunRecord]], None]:
    """A commit listener: the committed runs' own checkpoints are not needed any more."""
    checkpoints = CheckpointStore(store.files)

    def committed(records: Sequence[RunRecord]) -> None:
        by_task: dict[str, set[str]] = {}
        for record in records:
            by_task.setdefault(record.task, set()).add(record.run_id)
        try:
            checkpoints.discard_committed(by_task)
        except OSError as exc:  # left for `compact`, which removes those of committed runs
            warnings.warn(f"convgrid: checkpoints of committed runs left for compact: {exc}", stacklevel=2)

    return committed


def _pump(
    cells: Iterable[Cell | list[Cell] | None],
    executor: Executor,
    flusher: Flusher,
    channel: ReportChannel | None,
    listeners: Sequence[Callable[[list[RunRecord]], None]],
    doorbell: Doorbell | None = None,
    checkpoints: CheckpointTarget | None = None,
    grace_s: float = 30.0,
) -> None:
    source = Resubmit(work_items(cells, checkpoints), flusher.bar.resumes)
    with preemptible(grace_s):
        for records in executor.execute(source, channel, doorbell):
            records = source.arrived(records)
            for listener in listeners:
                listener(records)
            flusher.add(records)


def execute_cells(
    cells: Iterable[Cell | list[Cell] | None],
    store: ResultStore,
    executor: Executor,
    label: str,
    options: ExecutionOptions | None = None,
    *,
    channel: ReportChannel | None = None,
    sink: Callable[[list[RunRecord]], None] | None = None,
    total: int | None = None,
    doorbell: Doorbell | None = None,
    resumes: Resumes | None = None,
) -> Counter[str]:
    """Run cells, persisting records as they complete on the options' flush policy; all is committed
    when this returns. `channel` (from `executor.report_channel`) carries intermediate values to a
    judge; `sink` sees every finished record too, before it is flushed (the tuner tells its trials
    from them). `cells` is pulled lazily, as the executor's workers free up (`Executor.execute`);
    `doorbell`: rung by `cells` when it has an answer after a None (runner.execute.doorbell);
    `total` (default: its length, where it has one) sizes the progress bar; `resumes` counts the runs that
    resumed and the steps they saved."""
    options = options or ExecutionOptions()
    if total is None:
        total = len(cells) if isinstance(cells, Sized) else 0
    bar = Progress(total, label, enabled=options.progress, resumes=resumes)
    with staged_by_workers(executor, store), Flusher(store, options.flush, bar) as flusher:
        flusher.on_commit(MergeCadence(executor, store.root, store.base, settings().compact_parts))
        flusher.on_commit(discard_checkpoints(store))
        listeners = [sink] if sink is not None else []
        target = checkpoint_target(store, options)
        _pump(cells, executor, flusher, channel, listeners, doorbell, target, options.preempt_grace_s)
    return flusher.counts


def checkpoint_target(store: ResultStore, options: ExecutionOptions) -> CheckpointTarget | None:
    """Where the runs of a command save their checkpoints: under its results root, unless turned off."""
    if not options.checkpoints:
        return None
    return CheckpointTarget(store.root, options.checkpoint_every_s, settings().keep_final_s)


def execute_shared(
    grid: CellSource,
    todo: np.ndarray,
    store: ResultStore,
    executor: Executor,
    claims: Claims,
    retry_failed: bool,
    label: str,
    options: ExecutionOptions,
    resumes: Resumes | None = None,
) -> Counter[str]:
    """Run the blocks of the grid this driver claims (runner.coord.claims), claimed lazily as the executor
    asks for work (runner.execute.waves): drivers started on the same grid and root split its cells, and
    take over those of a dead one. `todo` indexes the grid's cells."""

    def still_todo(positions: np.ndarray) -> np.ndarray:
        return plan_grid(grid, store, retry_failed, positions).todo

    claims.start()
    try:
        bar = Progress(len(todo), label, enabled=options.progress, resumes=resumes)
        with staged_by_workers(executor, store), Flusher(store, options.flush, bar) as flusher:
            source = WaveSource(claims, grid, todo, still_todo, settle=flusher.settle)
            flusher.on_commit(source.committed)
            flusher.on_commit(MergeCadence(executor, store.root, store.base, settings().compact_parts))
            flusher.on_commit(discard_checkpoints(store))
            target = checkpoint_target(store, options)
            _pump(source, executor, flusher, None, [source.arrived], None, target, options.preempt_grace_s)
        return flusher.counts
    finally:
        claims.close()  # after the last commit: what this driver leaves unfinished is free at once
