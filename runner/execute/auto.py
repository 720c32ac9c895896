"""Where a command's runs execute: the executor factory, and the one policy behind `--executor auto`.

`--executor local` runs every cell in process, `--executor ray` every cell on Ray (the embedded one, or
the cluster of `--address`). `auto`, the default, decides here, and nowhere else:

1. Ray at once where only Ray can do what was asked: a cluster (`--address`), runs killed past their
   deadline (`--timeout`: a run in the driver cannot be killed), GPU actors (`--gpus-per-worker`).
2. In process, without ever starting Ray, for a grid whose cells left are known to take less than
   `CONVGRID_SMALL_WORK_S` (3 s) by the median stored run time of each task (`runner.run.plan.
   expected_seconds`). Why: starting the embedded Ray, warming two actors (their torch imports) and
   stopping it costs about 5 s of both cores on the project's 2-core machine, so a grid shorter than that
   is faster alone. Measured (`python benchmarks/auto_policy.py --repeats 3`: 8 new cells of a stored
   least-squares grid, spawn to exit, 2026-11-27, load average ~8): as typed 8.4 / 9.6 / 12.8 s; the same
   command without this rule (the warm start) 1.48x that at the median (0.94 / 1.48 / 1.91 within a
   round); `--executor ray` 2.26x.
3. Otherwise the warm start (runner.execute.warm): the cells run in process, and Ray starts in a thread
   only once the runs timed there say it saves more than it costs (`CONVGRID_RAY_COST_S`, 5 s), while
   they go on; work that ends first never waits for it. A study's trials and a grid's cells alike: a
   300-trial study of 10 ms runs never starts Ray on 2 cores, which took it from 0.60-0.68 to 0.78-1.06
   of `optimize` on the process clock, and a grid of 1,000 runs of 25 ms went from 0.65 of the sequential
   loop (Ray started at once) to about local-2's 0.50 (docs/architecture.md, "Concurrency mechanisms,
   each measured alone").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from runner.execute.base import Executor
from runner.execute.options import ExecutionOptions
from runner.settings import settings

Choice = Literal["local", "warm", "ray"]
# (seconds the caller would pay attention to) -> expected seconds of the work left, or None where unknown
# or surely longer: the estimate is asked for only where it can decide.
Estimate = Callable[[float], float | None]


@dataclass(frozen=True)
class AutoPolicy:
    small_work_s: float  # work known to be shorter runs in process (CONVGRID_SMALL_WORK_S)
    ray_cost_s: float  # what the embedded Ray costs to start, warm and stop (CONVGRID_RAY_COST_S)

    @classmethod
    def from_settings(cls) -> AutoPolicy:
        knobs = settings()
        return cls(knobs.small_work_s, knobs.ray_cost_s)

    def choose(self, options: ExecutionOptions, estimate: Estimate | None = None) -> Choice:
        """The executor for `options`; `estimate` (a grid's) says how long its work left would take."""
        if options.executor in ("local", "ray"):
            return options.executor
        if options.needs_ray:
            return "ray"
        if estimate is not None and self.small_work_s > 0:
            expected = estimate(self.small_work_s)
            if expected is not None and expected < self.small_work_s:
                return "local"
        return "warm"

    def executor(
        self, options: ExecutionOptions, estimate: Estimate | None = None, label: str | None = None
    ) -> Executor:
        return build(self.choose(options, estimate), options, self.ray_cost_s, label)


def build(
    choice: Choice, options: ExecutionOptions, ray_cost_s: float | None = None, label: str | None = None
) -> Executor:
    """The executor of `choice`, configured by every option that applies to it; `label` says what it
    runs (a grid's or a study's name), for Ray's dashboard."""
    if choice == "local":
        from runner.execute.local import LocalExecutor

        return LocalExecutor(options.threads, options.timeout_s, options.batch, workers=options.workers)
    from runner.execute.ray_pool import RayExecutor

    pool = RayExecutor(
        address=options.address,
        workers=options.workers,
        threads=options.threads,
        timeout_s=options.timeout_s,
        grace_s=options.grace_s,
        batch=options.batch,
        gpus_per_worker=options.gpus_per_worker or 0.0,
        label=label,
    )
    if choice == "ray":
        return pool
    from runner.execute.warm import WarmStartExecutor

    cost = ray_cost_s if ray_cost_s is not None else settings().ray_cost_s
    return WarmStartExecutor(pool, cost_s=cost)


def make_executor(options: ExecutionOptions, estimate: Estimate | None = None, *, label: str | None = None) -> Executor:
    """The executor `options` ask for, `auto` decided by the settings' policy. `label` names the work
    (the grid or the study), which its Ray actors are named after. It is not an option: one
    ExecutionOptions serves every grid or study of a command, and the caller that knows what it runs
    (run_grid, tune) passes it, so a notebook's run_grid names its actors as the command line's does."""
    return AutoPolicy.from_settings().executor(options, estimate, label)
