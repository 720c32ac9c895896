"""The report channels of the executors: intermediate values from runs to a judge in the driver.

* in process (`LocalChannel`): a run's reporter calls the judge directly, so the run stops at the
  very step the judge rejects;
* on Ray (`RayChannel`): the reporter (it pickles) sends (run_id, step, value) to a channel actor
  and gets back the driver's latest verdict for that run; a pump thread in the driver drains the
  actor into the judge and posts verdicts, so a rejected run stops at its next report. Workers never
  see what the judge does with the values (an Optuna storage, say).

Only steps divisible by `every` are forwarded, so runs are compared at the same steps.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from runner.execute.base import Judge, Reporter, ReporterFactory, ReportSpec, WorkItem


def transform(value: float, log: bool) -> float:
    if not log:
        return float(value)
    return math.log10(max(float(value), 1e-300)) if not math.isnan(value) else math.nan


@dataclass
class _Reporter(ABC):
    """A run's `report` callback: forwards every `every`-th value of `metric` (transformed as the
    objective is) and answers with the judge's verdict (True: go on)."""

    run_id: str
    spec: ReportSpec

    def __call__(self, step: int, metrics: Mapping[str, float]) -> bool:
        if step % self.spec.every or self.spec.metric not in metrics:
            return True
        return self.verdict(step, transform(metrics[self.spec.metric], self.spec.log))

    @abstractmethod
    def verdict(self, step: int, value: float) -> bool:
        """The judge's answer for this run at `step` (True: go on)."""


@dataclass
class _DirectReporter(_Reporter):
    judge: Judge | None = None  # the driver's judge, in the same process

    def verdict(self, step: int, value: float) -> bool:
        assert self.judge is not None
        return self.judge(self.run_id, step, value)


@dataclass
class _DirectReporters:
    judge: Judge
    spec: ReportSpec

    def __call__(self, item: WorkItem) -> Reporter | None:
        return _DirectReporter(item.run_id, self.spec, judge=self.judge)


class LocalChannel:
    """The in-process channel: reporters call the judge."""

    def __init__(self, judge: Judge, spec: ReportSpec) -> None:
        self.reporters: ReporterFactory = _DirectReporters(judge, spec)

    @contextmanager
    def batch(self) -> Iterator[None]:
        yield

    def close(self) -> None:
        pass


@dataclass
class _ActorReporter(_Reporter):
    channel: Any = None  # a channel actor handle, reached from inside a Ray actor
    fresh: bool = True  # no value sent yet: a stop verdict left by an earlier run of this id is stale

    def verdict(self, step: int, value: float) -> bool:
        import ray

        fresh, self.fresh = self.fresh, False
        return bool(ray.get(self.channel.report.remote(self.run_id, step, value, fresh)))


@dataclass
class _ActorReporters:
    """Pickled with each chunk to the actors; builds one reporter per run."""

    channel: Any
    spec: ReportSpec

    def __call__(self, item: WorkItem) -> Reporter | None:
        return _ActorReporter(item.run_id, self.spec, channel=self.channel)


class _Pump:
    """Driver thread: channel actor -> judge -> verdicts, while a batch runs on Ray."""

    def __init__(self, channel: Any, judge: Judge, poll_s: float = 0.2) -> None:
        self.channel = channel
        self.judge = judge
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> None:
        import ray

        ray.get(self.channel.reset.remote())
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="convgrid-report-channel", daemon=True)
        self._thread.start()

    def _pump_once(self, timeout: float) -> None:
        import ray

        values = ray.get(self.channel.drain.remote(timeout))
        stops = [rid for rid, step, value in values if not self.judge(rid, step, value)]
        if stops:
            ray.get(self.channel.stop.remote(stops))

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                self._pump_once(self.poll_s)
        except BaseException as exc:  # noqa: BLE001 - surfaced by finish()
            self.error = exc

    def finish(self) -> None:
        """Stop the thread and hand the judge every value still queued (all runs of the batch are done)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            raise self.error
        self._pump_once(0.0)


class RayChannel:
    """The Ray channel: an actor that queues values and holds verdicts (Ray must be connected)."""

    def __init__(self, judge: Judge, spec: ReportSpec) -> None:
        from runner.execute.channel_actor import ReportChannelActor  # imports ray

        self.actor = ReportChannelActor.options(num_cpus=0).remote()
        self.judge = judge
        self.reporters: ReporterFactory = _ActorReporters(self.actor, spec)

    @contextmanager
    def batch(self) -> Iterator[None]:
        pump = _Pump(self.actor, self.judge)
        pump.start()
        try:
            yield
        finally:
            pump.finish()

    def close(self) -> None:
        import ray

        ray.kill(self.actor)
