"""The run statuses and the rules that follow from them, defined once.

A leaf: it imports nothing, so the task protocol, the store, the executors and the tuner all share
it without pulling each other in.

    ok, diverged      final: the run is done and is never run again (a diverging learner is a result)
    failed, timeout   run again only on request (`--retry-failed`): a bug or a budget, not a result
    pruned            always run again: a pruner stopped it for one study, the cell itself is unfinished
"""

from __future__ import annotations

from typing import Literal

Status = Literal["ok", "diverged", "failed", "timeout", "pruned"]

OK: Status = "ok"
DIVERGED: Status = "diverged"
FAILED: Status = "failed"
TIMEOUT: Status = "timeout"
PRUNED: Status = "pruned"
# Not a stored status: a run stopped by preemption (SIGTERM) after saving its checkpoint. The runner
# never stores it; the run resumes from that checkpoint on its next attempt.
PREEMPTED = "preempted"

ALL_STATUSES: tuple[Status, ...] = (OK, DIVERGED, FAILED, TIMEOUT, PRUNED)
FINAL_STATUSES: frozenset[str] = frozenset({OK, DIVERGED})
RETRY_ON_REQUEST: frozenset[str] = frozenset({FAILED, TIMEOUT})
ALWAYS_RERUN: frozenset[str] = frozenset({PRUNED})


def is_settled(status: str | None, retry_failed: bool = False) -> bool:
    """Whether a stored run with `status` is left alone by the next `run` (or `tune`): final runs
    always, failed and timed-out ones unless `retry_failed`. None (no stored run) is not settled."""
    if status in FINAL_STATUSES:
        return True
    return status in RETRY_ON_REQUEST and not retry_failed
