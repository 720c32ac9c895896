"""The driver's judge of intermediate values: which trial a run belongs to, its reported steps,
and the pruner's verdicts (through `Study.report`). The executor's report channel feeds `judge` (on
its own thread, on Ray) while the driver tells other trials; the tuner never needs to know which
executor runs the trials.
"""

from __future__ import annotations

import math
import threading

from runner.tune.optuna_adapter import Asked, Study


class PruningHub:
    def __init__(self, study: Study) -> None:
        self.study = study
        self._lock = threading.Lock()
        self._trials: dict[str, Asked] = {}
        self._last_step: dict[str, int] = {}
        self.stopped: set[str] = set()

    def add(self, run_id: str, trial: Asked) -> None:
        """A run starts: its values go to this trial, judged afresh (a pruned run asked again)."""
        with self._lock:
            self._trials[run_id] = trial
            self._last_step.pop(run_id, None)
            self.stopped.discard(run_id)

    def finish(self, run_id: str) -> None:
        """The run's record arrived and its trial is about to be told: no later value may reach the
        trial (the lock orders this after any judgement in progress on the channel's thread)."""
        with self._lock:
            self._trials.pop(run_id, None)
            self._last_step.pop(run_id, None)
            self.stopped.discard(run_id)

    def judge(self, run_id: str, step: int, value: float) -> bool:
        """Report one value; False when the pruner says the run must stop."""
        with self._lock:
            trial = self._trials.get(run_id)
            if trial is None or run_id in self.stopped:
                return run_id not in self.stopped
            if step <= self._last_step.get(run_id, -1) or math.isnan(value):
                return True  # a re-run after a lost worker repeats steps Optuna already has
            self._last_step[run_id] = step
            if not self.study.report(trial, value, step):
                self.stopped.add(run_id)
                return False
            return True
