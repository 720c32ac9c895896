"""LocalExecutor: every cell in the calling process (debuggable: breakpoints and tracebacks work),
one by one or, for consecutive cells with equal batch keys, as one batched call. Same records, same
order of events, as the Ray executor."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from runner.execute.base import BatchPolicy, Judge, ReportChannel, ReportSpec, WorkItem
from runner.execute.report_channel import LocalChannel
from runner.store.records import RunRecord


@dataclass
class LocalExecutor:
    """Runs cells in the calling process; `batch=False` runs every cell alone."""

    threads: int = 1
    timeout_s: float | None = None
    batch: bool = True
    max_batch: int = 64
    device: str = "cpu"  # "cuda": tasks that compute on ctx.device use this process's GPU
    name: str = "local"

    def execute(self, items: Sequence[WorkItem], channel: ReportChannel | None = None) -> Iterator[list[RunRecord]]:
        from runner.execute.worker import configure_threads, run_items  # imports the tasks (and torch)

        configure_threads(self.threads)
        records = run_items(
            items,
            device=self.device,
            threads=self.threads,
            timeout_s=self.timeout_s,
            reporters=channel.reporters if channel is not None else None,
            policy=BatchPolicy(enabled=self.batch, max_size=self.max_batch),
        )
        for record in records:
            yield [record]

    def start(self) -> None:
        pass  # nothing to acquire: runs execute in this process

    def report_channel(self, judge: Judge, spec: ReportSpec) -> ReportChannel:
        return LocalChannel(judge, spec)

    def close(self) -> None:
        pass
