"""LocalExecutor: every cell in the calling process, one by one (debuggable: breakpoints and
tracebacks work). Same records, same order of events, as the Ray executor."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from runner.execute.base import FeedStalled, Judge, ReportChannel, ReportSpec, WorkSource
from runner.execute.report_channel import LocalChannel
from runner.store.records import RunRecord


@dataclass
class LocalExecutor:
    """Runs cells one by one in the calling process."""

    threads: int = 1
    timeout_s: float | None = None
    name: str = "local"

    def execute(self, items: WorkSource, channel: ReportChannel | None = None) -> Iterator[list[RunRecord]]:
        from runner.execute.worker import configure_threads, run_item  # imports the tasks (and torch)

        configure_threads(self.threads)
        for item in items:  # pulled one at a time: the next item is asked for once the last run is yielded
            if item is None:
                raise FeedStalled()  # nothing runs between two pulls here, so a waiting source waits forever
            for one in item if isinstance(item, list) else [item]:
                reporter = channel.reporters(one) if channel is not None else None
                yield [run_item(one, threads=self.threads, timeout_s=self.timeout_s, reporter=reporter)]

    def start(self) -> None:
        pass  # nothing to acquire: runs execute in this process

    def report_channel(self, judge: Judge, spec: ReportSpec) -> ReportChannel:
        return LocalChannel(judge, spec)

    def close(self) -> None:
        pass
