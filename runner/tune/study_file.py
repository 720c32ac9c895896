"""The study file's model: every key, its type and bounds (pydantic, extra keys refused). A study file
names a task, fixed params, a search space, objectives, a sampler, a pruner and a budget; runner.tune.spec
turns it into StudyPlans, runner.tune.study_checks checks it against the task."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from runner.tune.space import SpaceParam, Strict

# Run columns an objective may name besides the task's summary metrics.
RUN_METRICS = ("flops", "wall_s", "n_steps")
SAMPLERS = ("tpe", "cmaes", "gp", "grid", "random")
PRUNERS = ("nop", "median", "successive_halving", "hyperband")


class Objective(Strict):
    metric: str
    direction: Literal["minimize", "maximize"] = "minimize"
    log: bool = Field(False, description="tell log10(metric) (values <= 0 are clipped to 1e-300 first)")
    nan_value: float | None = Field(
        None, description="value told when the metric is NaN/missing; None: the trial FAILs"
    )


class SamplerSpec(Strict):
    name: Literal["tpe", "cmaes", "gp", "grid", "random"] = "tpe"
    seed: int | None = 0
    options: dict[str, Any] = Field(default_factory=dict)


class PrunerSpec(Strict):
    name: Literal["nop", "median", "successive_halving", "hyperband"] = "nop"
    options: dict[str, Any] = Field(default_factory=dict)
    metric: str | None = Field(None, description="curve column reported as the intermediate value")
    log: bool | None = Field(None, description="report log10 of it (default: as the objective)")
    every: int = Field(1, ge=1, description="forward only steps divisible by this (aligned across trials)")


class Baseline(Strict):
    params: dict[str, Any] = Field(default_factory=dict)


class Reference(Strict):
    """A value the theory gives, drawn as a dashed line: on the history plot for an objective `metric` (as
    Optuna is told it: log10 where the objective says `log: true`), on the slice plot for a searched `param`."""

    label: str = Field(min_length=1, description="the legend's name for it, e.g. 'theory: 2/(lambda_max+lambda_min)'")
    value: float = Field(allow_inf_nan=False)
    metric: str | None = Field(None, description="an objective's metric: a horizontal line on the history plot")
    param: str | None = Field(None, description="a searched param: a vertical line on its slice")

    @model_validator(mode="after")
    def _one_axis(self) -> Reference:
        if (self.metric is None) == (self.param is None):
            raise ValueError("give exactly one of metric (an objective's) or param (a searched one)")
        return self


class StudyFile(Strict):
    name: str | None = None
    description: str = ""
    task: str
    params: dict[str, Any] = Field(default_factory=dict)
    space: dict[str, SpaceParam] = Field(min_length=1)
    objective: Objective | list[Objective]
    sampler: SamplerSpec | Literal["tpe", "cmaes", "gp", "grid", "random"] = Field(default_factory=SamplerSpec)
    pruner: PrunerSpec | Literal["nop", "median", "successive_halving", "hyperband"] = Field(default_factory=PrunerSpec)
    n_trials: int | None = Field(None, ge=1, le=1_000_000)
    parallel: int = Field(4, ge=1, le=10_000, description="trials in flight at once")
    mode: Literal["async", "deterministic"] = Field(
        "async",
        description="async: ask a trial as each finishes, tell in completion order; deterministic: ask "
        "`parallel` at once and tell them in trial-number order when all finished (reproducible)",
    )
    batch: int = Field(
        1, ge=1, description="trials asked together and handed to one worker, to run as one batch (run_batch)"
    )
    max_failed: int | None = Field(None, ge=1, description="stop after this many FAILed trials in one invocation")
    baselines: list[Baseline] = Field(default_factory=list)
    sweep: dict[str, list[Any]] = Field(default_factory=dict, description="one study per combination")
    report: list[str] = Field(default_factory=list, description="metrics printed for the best trials and baselines")
    reference: list[Reference] = Field(default_factory=list, description="the theory's values, drawn as lines")
