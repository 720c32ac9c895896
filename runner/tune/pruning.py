"""The driver's judge of intermediate values: which trial a run belongs to, its reported steps,
and Optuna's verdicts (`trial.report`, `trial.should_prune`). The executor's report channel feeds
`judge`; the tuner never needs to know which executor runs the trials.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import Any


class PruningHub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._trials: dict[str, Any] = {}
        self._last_step: dict[str, int] = {}
        self.stopped: set[str] = set()

    def begin(self, trials: Mapping[str, Any]) -> None:
        """Runs of a new batch: run_id -> the optuna Trial that receives its values."""
        with self._lock:
            self._trials = dict(trials)
            self._last_step = {}
            self.stopped = set()

    def judge(self, run_id: str, step: int, value: float) -> bool:
        """Report one value; False when the pruner says the run must stop."""
        with self._lock:
            trial = self._trials.get(run_id)
            if trial is None or run_id in self.stopped:
                return run_id not in self.stopped
            if step <= self._last_step.get(run_id, -1) or math.isnan(value):
                return True  # a re-run after a lost worker repeats steps Optuna already has
            self._last_step[run_id] = step
            trial.report(value, step)
            if trial.should_prune():
                self.stopped.add(run_id)
                return False
            return True
