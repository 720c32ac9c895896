"""The Ray actor that carries intermediate values from runs to the driver and verdicts back.

Imported only after `cluster.connect` (this module imports ray). Threaded (max_concurrency), so a
driver blocked in `drain` never delays a worker's `report`.
"""

from __future__ import annotations

import threading
from typing import Any

import ray


class _ReportChannelActor:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._queue: list[tuple[str, int, float]] = []
        self._stopped: set[str] = set()

    def report(self, run_id: str, step: int, value: float, fresh: bool = False) -> bool:
        """Queue a value; answer the driver's latest verdict for the run (False: stop). The first value
        of a run (`fresh`) clears a verdict left by an earlier run of the same id (a pruned run asked
        again while the channel stays open): the judge decides on the new run afresh."""
        with self._cond:
            if fresh:
                self._stopped.discard(run_id)
            self._queue.append((run_id, step, value))
            self._cond.notify_all()
            return run_id not in self._stopped

    def drain(self, timeout: float) -> list[tuple[str, int, float]]:
        """Everything queued, waiting up to `timeout` seconds for the first value."""
        with self._cond:
            if not self._queue and timeout > 0:
                self._cond.wait(timeout)
            out, self._queue = self._queue, []
            return out

    def stop(self, run_ids: list[str]) -> None:
        with self._cond:
            self._stopped.update(run_ids)

    def reset(self) -> None:
        """A new batch: forget verdicts (a pruned run asked again is judged afresh) and stale values."""
        with self._cond:
            self._stopped.clear()
            self._queue.clear()


# Threaded (max_concurrency) so that a driver blocked in `drain` never delays a worker's `report`.
_OPTIONS: dict[str, Any] = {"max_concurrency": 16}
ReportChannelActor: Any = ray.remote(**_OPTIONS)(_ReportChannelActor)
