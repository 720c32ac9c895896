"""Intermediate values from runs to the Optuna pruner, which lives in the driver only.

A run's `RunContext.report(step, **metrics)` calls a reporter built by a `ReporterFactory`:

* local executor: `LocalReporterFactory` calls `PruningHub.judge` directly, so the run stops at the
  very step the pruner rejects;
* Ray executor: `ChannelReporterFactory` (it pickles) sends (run_id, step, value) to a
  `PruningChannel` actor and gets back the driver's latest verdict for that run. A `ChannelPump`
  thread in the driver drains the channel, reports to Optuna (`trial.report`, `trial.should_prune`)
  and posts verdicts, so a rejected run stops at its next report. Workers never touch the storage.

Only steps divisible by `every` are forwarded, so trials are compared at the same steps.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.worker import Reporter, WorkItem


def transform(value: float, log: bool) -> float:
    if not log:
        return float(value)
    return math.log10(max(float(value), 1e-300)) if not math.isnan(value) else math.nan


class PruningHub:
    """The driver's side: which trial a run belongs to, its reported steps, and the verdicts."""

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


@dataclass
class _Reporter(ABC):
    """A run's `report` callback: forwards every `every`-th value of `metric` (transformed as the
    objective is) and answers with the pruner's verdict (True: go on)."""

    run_id: str
    metric: str
    log: bool
    every: int

    def __call__(self, step: int, metrics: Mapping[str, float]) -> bool:
        if step % self.every or self.metric not in metrics:
            return True
        return self.verdict(step, transform(metrics[self.metric], self.log))

    @abstractmethod
    def verdict(self, step: int, value: float) -> bool:
        """The pruner's answer for this run at `step` (True: go on)."""


@dataclass
class LocalReporter(_Reporter):
    hub: PruningHub | None = None  # the driver's hub, in the same process

    def verdict(self, step: int, value: float) -> bool:
        assert self.hub is not None
        return self.hub.judge(self.run_id, step, value)


@dataclass
class LocalReporterFactory:
    hub: PruningHub
    metric: str
    log: bool
    every: int = 1

    def __call__(self, item: WorkItem) -> Reporter | None:
        return LocalReporter(item.run_id, self.metric, self.log, self.every, hub=self.hub)


@dataclass
class ChannelReporter(_Reporter):
    channel: Any = None  # a PruningChannel actor handle, reached from inside a Ray actor

    def verdict(self, step: int, value: float) -> bool:
        import ray

        return bool(ray.get(self.channel.report.remote(self.run_id, step, value)))


@dataclass
class ChannelReporterFactory:
    """Pickled with each chunk to the actors; builds one reporter per run."""

    channel: Any
    metric: str
    log: bool
    every: int = 1

    def __call__(self, item: WorkItem) -> Reporter | None:
        return ChannelReporter(item.run_id, self.metric, self.log, self.every, channel=self.channel)


class ChannelPump:
    """Driver thread: channel -> hub -> verdicts, while a batch runs on Ray."""

    def __init__(self, channel: Any, hub: PruningHub, poll_s: float = 0.2) -> None:
        self.channel = channel
        self.hub = hub
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        import ray

        ray.get(self.channel.reset.remote())
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="convgrid-pruning", daemon=True)
        self._thread.start()

    def _pump_once(self, timeout: float) -> None:
        import ray

        stops = [rid for rid, step, value in ray.get(self.channel.drain.remote(timeout)) if not self.hub.judge(rid, step, value)]
        if stops:
            ray.get(self.channel.stop.remote(stops))

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._pump_once(self.poll_s)
        except BaseException as exc:  # noqa: BLE001 - surfaced by finish()
            self.error = exc

    def finish(self) -> None:
        """Stop the thread and hand Optuna every value still queued (all runs of the batch are done)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            raise self.error
        self._pump_once(0.0)


def make_channel() -> Any:
    """Start the channel actor (Ray must be connected)."""
    from runner.pruning_actor import PruningChannel

    return PruningChannel.options(num_cpus=0).remote()
