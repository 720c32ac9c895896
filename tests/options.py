"""Execution options for tests: the command line's, quiet (no progress bar), in process unless asked."""

from __future__ import annotations

from typing import Any

from runner.execute.options import ExecutionOptions, ExecutorKind, FlushPolicy


def opts(
    executor: ExecutorKind = "local",
    *,
    progress: bool = False,
    flush_every: int = FlushPolicy.every,
    flush_s: float = FlushPolicy.seconds,
    **changes: Any,
) -> ExecutionOptions:
    return ExecutionOptions(executor=executor, progress=progress, flush=FlushPolicy(flush_every, flush_s), **changes)
