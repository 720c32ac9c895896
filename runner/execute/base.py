"""What an executor is: the contract between the layers that plan work (run, tune) and the places
where it runs. Light on purpose (no torch, no Ray): planners import it to type their executor.

    WorkItem       what travels to a worker: run_id, task name, full validated params (JSON-ready)
    RunRecord      what comes back (runner.store.records): a runs/ row and its curve columns
    ReportChannel  carries a run's intermediate values to a judge in the driver (an Optuna pruner)
                   and its verdicts back; each executor builds the channel that fits where it runs
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from runner.store.records import RunRecord

if TYPE_CHECKING:
    from runner.execute.doorbell import Doorbell


@dataclass(frozen=True)
class CheckpointTarget:
    """Where and how often a worker saves its runs' checkpoints (runner.execute.checkpointing): under the
    results root `root` (a local path or a URI, possibly with credentials: never printed), every
    `every_s` seconds of a run (None: the default cadence, which adapts so saving costs at most 1 %); a
    run's final state, where its budget can grow, if the run took `keep_final_s` seconds or more."""

    root: str = field(repr=False)
    every_s: float | None = None
    keep_final_s: float = 1.0

    def __repr__(self) -> str:
        return f"CheckpointTarget(every_s={self.every_s!r})"


@dataclass(frozen=True)
class WorkItem:
    """What travels to a worker: enough to rebuild and run one cell (and, where its learner can, to save
    and resume it: `checkpoints`)."""

    run_id: str
    task: str
    params: dict[str, Any]  # full validated params, JSON-ready
    checkpoints: CheckpointTarget | None = None


@dataclass(frozen=True)
class BatchPolicy:
    """How a worker groups the cells of a chunk into batched calls (runner.execute.batching).
    `enabled=False` runs every cell alone (comparisons, debugging); `budget_bytes=None` picks the
    device's default (a fraction of free GPU memory, a fixed budget on the CPU)."""

    enabled: bool = True
    max_size: int = 64
    budget_bytes: int | None = None


class FeedStalled(RuntimeError):
    """An `execute` source yielded None (it waits for runs) while no run was in flight: it would wait forever."""

    def __init__(self) -> None:
        super().__init__("the work source yielded None (waiting for runs) while no run was in flight")


# What `Executor.execute` consumes, lazily: an item, a group of items that must travel in one chunk to
# one worker (trials a tuner wants run as one batch), or None (nothing yet: the source waits for runs).
WorkSource = Iterable[WorkItem | list[WorkItem] | None]

# A run's `RunContext.report` callback: (step, metrics) -> go on?
Reporter = Callable[[int, Mapping[str, float]], bool]
# Builds the reporter of one run where the run executes (so it must pickle for Ray).
ReporterFactory = Callable[[WorkItem], Reporter | None]
# The driver's verdict on one intermediate value: (run_id, step, value) -> go on?
Judge = Callable[[str, int, float], bool]


@dataclass(frozen=True)
class ReportSpec:
    """Which intermediate values a channel forwards: every `every`-th step of `metric`, as log10 when
    `log` (the objective's own transform, so pruner and objective compare like with like)."""

    metric: str
    log: bool = False
    every: int = 1


@runtime_checkable
class ForecastsWork(Protocol):
    """An executor that can use what a caller knows of the work ahead: `expect_items(left)` hands it a
    count of the items still to come (called as it runs; None: unknown again). The warm start
    (runner.execute.warm) then starts Ray only once the work is forecast to outlast Ray's cost."""

    def expect_items(self, left: Callable[[], int] | None) -> None: ...

    def expect_total(self, items: int) -> None:
        """`items` in all (a grid's cells): those still to come are the ones not yet run."""


class ReportChannel(Protocol):
    """Intermediate values from runs to a judge in the driver, verdicts back.

    `batch()` opens the channel around one `execute` call: values reported while it is open reach
    the judge, and a run whose value the judge rejects is told to stop (its `report` answers False)
    at that step or, across processes, at its next report. `reporters` is what travels with the
    work. `close()` releases what the channel holds (a Ray actor); the channel's owner calls it.
    """

    @property
    def reporters(self) -> ReporterFactory: ...

    def batch(self) -> AbstractContextManager[None]: ...

    def close(self) -> None: ...


class Executor(Protocol):
    """Where cells run.

    `execute(items, channel)` runs every item once and yields lists of finished records as they
    complete: completion order, not submission order. `items` is consumed lazily: the executor pulls
    the next items only as workers free up (at most one chunk per free slot ahead), so a source may be
    a generator over a million cells, or a tuner that asks its next trial when a run finishes. A
    source may yield a list of items, a group that one worker gets in one chunk (the tuner's trials
    pending at once, for a worker to run as one batch). A source yields None when it has nothing yet
    (it waits for runs in flight): the executor asks again after its next yield, and raises
    `FeedStalled` if nothing is in flight to wait for. With a `doorbell` (runner.execute.doorbell), an
    executor whose wait can be interrupted listens to it and asks again as soon as the source rings
    (an answer made on another thread); others ignore it, and the source then answers in their thread.
    Records are yielded to the caller before the source is pulled again, so what the caller does with
    them (tell a trial) is seen by the source; every item is yielded exactly once (a run lost
    with its worker is run again, never yielded twice; a run killed for its timeout is yielded as a
    `timeout` record). A task's exception is a `failed` record, never an exception out of `execute`.
    An executor that runs elsewhere yields each record as soon as its run finishes (not when its chunk
    does) and yields an empty list when nothing finished for a while, so the caller can flush on time.
    The caller persists what is yielded: an executor writes nothing to the store's data, and sees the
    results root only if it offers `stage_to(root)` (runner.execute.staging.StagesResults) and the
    caller calls it; then its workers that can reach the root write their runs' curve rows there as
    staged parts (runner.store.incoming) and its records carry the parts' names instead
    (`RunRecord.staged`), which the caller commits like any record. The root's credentials then travel
    to the workers, and every message redacts them (runner.errors.redact). One exception: such an
    executor may offer `merge_on_worker` (runner.execute.worker_merge.MergesOnWorkers), which the
    caller's commit listener calls to have the store's own merge (runner.store.merge, under the
    store's writers' lock) run on a node whose workers reach the root: the executor picks the node,
    the store's code writes, and the merged bytes never pass through the driver.
    With a `channel` (made by this executor's `report_channel`), runs report through it.

    `report_channel(judge, spec)` builds the channel that fits this executor (a direct call in
    process, an actor on Ray); the caller owns it and closes it.

    `start()` acquires the workers (joins or starts Ray); `execute` starts them if needed, and a
    caller that must fail before writing anything (an unreachable cluster) calls it first.
    `close()` releases workers; an executor may be used for several `execute` calls before it.
    """

    name: str

    def start(self) -> None: ...

    def execute(
        self, items: WorkSource, channel: ReportChannel | None = None, doorbell: Doorbell | None = None
    ) -> Iterator[list[RunRecord]]: ...

    def report_channel(self, judge: Judge, spec: ReportSpec) -> ReportChannel: ...

    def close(self) -> None: ...
