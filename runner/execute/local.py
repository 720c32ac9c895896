"""LocalExecutor: every cell in the calling process (debuggable: breakpoints and tracebacks work),
one by one or, for consecutive cells with equal batch keys, as one batched call. Same records, same
order of events, as the Ray executor."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runner.execute.base import BatchPolicy, FeedStalled, Judge, ReportChannel, ReportSpec, WorkItem, WorkSource
from runner.execute.report_channel import LocalChannel
from runner.store.records import RunRecord


@dataclass
class LocalExecutor:
    """Runs cells one by one in the calling process."""

    threads: int = 1
    timeout_s: float | None = None
    batch: bool = True
    max_batch: int = 64
    device: str = "cpu"  # "cuda": tasks that compute on ctx.device use this process's GPU
    name: str = "local"

    def execute(self, items: WorkSource, channel: ReportChannel | None = None) -> Iterator[list[RunRecord]]:
        from runner.execute.batching import batch_key
        from runner.execute.worker import configure_threads, run_items  # imports the tasks (and torch)

        configure_threads(self.threads)
        policy = BatchPolicy(enabled=self.batch, max_size=self.max_batch)
        reporters = channel.reporters if channel is not None else None

        def run(group: list[WorkItem]) -> Iterator[list[RunRecord]]:
            for record in run_items(
                group,
                device=self.device,
                threads=self.threads,
                timeout_s=self.timeout_s,
                reporters=reporters,
                policy=policy,
            ):
                yield [record]
            group.clear()

        # Items are pulled one at a time; a run starts once the next item cannot join it: a batchable item
        # waits for the items after it while they share its batch key (up to a batch), anything else runs
        # at once. A source that answers None (it waits for runs) gets the batch held so far run first; a
        # group from the source runs as one chunk (batched by key inside).
        group: list[WorkItem] = []
        key: Any = None
        for item in items:
            if item is None:
                if not group:
                    raise FeedStalled()  # nothing runs between two pulls here, so a waiting source waits forever
                yield from run(group)
                continue
            if isinstance(item, list):  # items meant to run together (a tuner's trials): one chunk
                yield from run(group)
                yield from run(list(item))
                continue
            k = batch_key(item) if self.batch else None
            if group and k != key:
                yield from run(group)
            group.append(item)
            key = k
            if k is None or len(group) >= self.max_batch:
                yield from run(group)
        yield from run(group)

    def start(self) -> None:
        pass  # nothing to acquire: runs execute in this process

    def report_channel(self, judge: Judge, spec: ReportSpec) -> ReportChannel:
        return LocalChannel(judge, spec)

    def close(self) -> None:
        pass
