"""Study files: load and validate an Optuna study (task, fixed params, search space, objectives,
sampler, pruner, budget) into `StudyPlan`s, one per combination of `sweep` values.

Everything is checked before any work starts, and the first problem becomes a ConfigError naming the
file, the key and the valid choices, as for grid files. The space is checked against the task's
params at each bound (and every categorical choice), so a typo or an out-of-range bound fails here,
not in trial 37.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from runner.errors import ConfigError, did_you_mean
from runner.grid.cells import Cell
from runner.grid.identity import ParamValueError, run_id, validate_params
from runner.grid.spec import params_error, read_source
from runner.tune.space import (
    MAX_GRID_POINTS,
    AnySpaceParam,
    CategoricalParam,
    FloatParam,
    FloatVectorParam,
    IntParam,
    SpaceParam,
    Strict,
    element_name,
    extremes,
    first_point,
    grid_points,
)
from tasks import Task, UnknownTaskError, get_task, task_names
from tasks.base import BatchableTask

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


@dataclass(frozen=True)
class StudyPlan:
    """One validated study, ready for the driver."""

    name: str
    source: str
    description: str
    task: str
    fixed: dict[str, Any]
    space: dict[str, AnySpaceParam]
    objectives: list[Objective]
    sampler: SamplerSpec
    pruner: PrunerSpec
    n_trials: int
    parallel: int
    max_failed: int
    baselines: list[Cell] = field(default_factory=list)
    report: list[str] = field(default_factory=list)
    mode: Literal["async", "deterministic"] = "async"
    batch: int = 1

    @property
    def directions(self) -> list[Literal["minimize", "maximize"]]:
        return [o.direction for o in self.objectives]

    @property
    def pruning(self) -> bool:
        return self.pruner.name != "nop"

    def grid(self) -> dict[str, list[Any]]:
        """The grid sampler's search space: explicit `grid` lists, int ranges, float steps, choices."""
        out: dict[str, list[Any]] = {}
        for name, p in self.space.items():
            if isinstance(p, FloatVectorParam):
                raise ValueError("the grid sampler cannot search a float_vector")  # refused at load time
            if isinstance(p, CategoricalParam):
                out[name] = list(p.choices)
            elif p.grid is not None:
                out[name] = list(p.grid)
            elif isinstance(p, IntParam):
                out[name] = list(range(p.low, p.high + 1, p.step))
            else:
                assert p.step is not None
                n = int(math.floor((p.high - p.low) / p.step + 1e-9))
                out[name] = [p.low + i * p.step for i in range(n + 1)]
        return out

    def assemble(self, sampled: dict[str, Any]) -> dict[str, Any]:
        """The task's params from the sampler's flat values (vector elements gathered into lists)."""
        out = {k: v for k, v in sampled.items() if "[" not in k}
        for name, p in self.space.items():
            if isinstance(p, FloatVectorParam):
                out[name] = [float(sampled[element_name(name, i)]) for i in range(p.size)]
        return out

    def cell(self, sampled: dict[str, Any]) -> Cell:
        """The run a trial asks for (raises pydantic.ValidationError for an invalid combination)."""
        task = get_task(self.task)
        params = validate_params(task, {**self.fixed, **self.assemble(sampled)})
        return Cell(run_id(task, params), task.name, params, 0)


def _structure_error(exc: ValidationError, file: str, raw: dict[str, Any]) -> ConfigError:
    errors = exc.errors()
    # Of a union's alternatives, the literal one says most ("should be 'tpe', 'cmaes', ...").
    # A misspelt key shows up twice (the required key missing, the typo extra): name the typo.
    err = next((e for e in errors if e["type"] == "literal_error"), None)
    err = err or next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    names = {"Objective", "list[Objective]", "SamplerSpec", "PrunerSpec"}
    loc = [str(x) for x in err["loc"]]
    loc = [
        x
        for i, x in enumerate(loc)
        if not (
            x in names
            or x.startswith("literal[")
            or (i == 2 and loc[0] == "space" and x in ("float", "int", "categorical", "float_vector"))
        )
    ]
    key = ".".join(loc) or None
    choices = None
    if err["type"] == "extra_forbidden":
        section: dict[str | int, type[BaseModel]] = {
            "objective": Objective,
            "sampler": SamplerSpec,
            "pruner": PrunerSpec,
            "baselines": Baseline,
        }
        model = section.get(loc[0], StudyFile) if len(loc) > 1 else StudyFile
        if loc[0] == "space" and len(loc) > 2:
            entry = (raw.get("space") or {}).get(loc[1])
            kind = entry.get("type") if isinstance(entry, dict) else None
            kinds: dict[str, type[BaseModel]] = {
                "int": IntParam,
                "categorical": CategoricalParam,
                "float_vector": FloatVectorParam,
            }
            model = kinds.get(str(kind), FloatParam)
        choices = list(model.model_fields)
    elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        choices = ["float", "int", "categorical", "float_vector"]
    elif err["type"] == "literal_error":
        choices = [c.strip(" '") for c in str(err.get("ctx", {}).get("expected", "")).replace(" or ", ",").split(",")]
    shown = (
        "input" in err
        and err["type"] not in ("extra_forbidden", "literal_error")
        and not isinstance(err["input"], dict)
    )
    message = err["msg"] + (
        f" (got {err['input']!r})" if shown else f" (got {err['input']!r})" if err["type"] == "literal_error" else ""
    )
    if err["type"] == "extra_forbidden" and choices and loc:
        message = "unknown key" + did_you_mean(loc[-1], choices)
    return ConfigError(message, file=file, key=key, choices=choices)


def _check_params(
    task: Task, raw: dict[str, Any], file: str, varied: dict[str, Any], space: Any = (), where: str = "params"
) -> None:
    """Validate one point; the error's key is prefixed with where it came from (space or params)."""
    try:
        validate_params(task, raw)
    except ValidationError as exc:
        error = params_error(exc, task, file, None, varied)
        if error.key:
            error.key = f"{'space' if error.key in space else where}.{error.key}"
        raise error from None
    except ParamValueError as exc:
        prefix = "space" if exc.key in space else where
        raise ConfigError(f"{exc}; with {varied}", file=file, key=f"{prefix}.{exc.key}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{exc}; with {varied}", file=file, key=where) from None


def _corners(space: dict[str, Any]) -> list[dict[str, Any]]:
    """The first point of the space, then each param at each of its extremes (others at first)."""
    first = {n: first_point(p) for n, p in space.items()}
    out = [first]
    for n, p in space.items():
        out.extend({**first, n: v} for v in extremes(p))
    return out


def _check_vector(p: FloatVectorParam, sampler: str, file: str, key: str) -> None:
    if sampler == "grid":
        raise ConfigError("the grid sampler cannot search a float_vector", file=file, key=key)
    if isinstance(p.start, list) and len(p.start) != p.size:
        raise ConfigError(f"start has {len(p.start)} values, size is {p.size}", file=file, key=f"{key}.start")
    if p.start is not None and any(not p.low <= v <= p.high for v in p.start_values()):
        raise ConfigError(f"start values must lie in [{p.low}, {p.high}]", file=file, key=f"{key}.start")


def _check_grid_size(space: dict[str, AnySpaceParam], file: str) -> None:
    total = math.prod(grid_points(p) for p in space.values())
    if total > MAX_GRID_POINTS:
        sizes = ", ".join(f"{n}: {grid_points(p):,}" for n, p in space.items())
        raise ConfigError(
            f"the grid sampler's space has {total:,} points ({sizes}), more than {MAX_GRID_POINTS:,}; "
            "use a coarser step or a grid list",
            file=file,
            key="space",
        )


def _check_space(spec: StudyFile, task: Task, fixed: dict[str, Any], file: str) -> None:
    for name, p in spec.space.items():
        key = f"space.{name}"
        if name in fixed:
            raise ConfigError("param is both fixed (params) and searched (space)", file=file, key=key)
        if isinstance(p, FloatParam | IntParam | FloatVectorParam):
            if p.low > p.high:
                raise ConfigError(f"low {p.low} > high {p.high}", file=file, key=key)
            if p.log and p.low <= 0:
                raise ConfigError("a log-scale param needs low > 0", file=file, key=f"{key}.low")
            if isinstance(p, FloatVectorParam):
                _check_vector(p, spec_sampler(spec), file, key)
                continue
            if p.log and isinstance(p, FloatParam) and p.step is not None:
                raise ConfigError("step and log cannot be combined", file=file, key=f"{key}.step")
            if p.log and isinstance(p, IntParam) and p.step != 1:
                raise ConfigError("an int log-scale param needs step 1", file=file, key=f"{key}.step")
            if p.grid is not None and any(not p.low <= v <= p.high for v in p.grid):
                raise ConfigError(f"grid values must lie in [{p.low}, {p.high}]", file=file, key=f"{key}.grid")
        if isinstance(p, FloatParam) and spec_sampler(spec) == "grid" and p.grid is None and p.step is None:
            raise ConfigError("the grid sampler needs a `grid` list or a `step` for a float param", file=file, key=key)
    if spec_sampler(spec) == "grid":
        _check_grid_size(spec.space, file)
    for point in _corners(spec.space):
        _check_params(task, {**fixed, **point}, file, point, spec.space)


def spec_sampler(spec: StudyFile) -> str:
    return spec.sampler.name if isinstance(spec.sampler, SamplerSpec) else spec.sampler


def _check_metrics(spec: StudyFile, task: Task, objectives: list[Objective], pruner: PrunerSpec, file: str) -> None:
    valid = sorted(task.summary_fields) + list(RUN_METRICS)
    for i, obj in enumerate(objectives):
        if obj.metric not in valid:
            key = "objective.metric" if len(objectives) == 1 else f"objective.{i}.metric"
            raise ConfigError(f"{task.name} has no metric {obj.metric!r}", file=file, key=key, choices=valid)
    for i, metric in enumerate(spec.report):
        if metric not in valid:
            raise ConfigError(f"{task.name} has no metric {metric!r}", file=file, key=f"report.{i}", choices=valid)
    if pruner.name == "nop":
        return
    if len(objectives) > 1:
        raise ConfigError(
            "Optuna's pruners work on one objective; use pruner: nop with several",
            file=file,
            key="pruner.name",
            choices=["nop"],
        )
    curves = sorted(task.curve_fields)
    if pruner.metric is None:
        raise ConfigError(
            "a pruner needs the curve column whose values it judges", file=file, key="pruner.metric", choices=curves
        )
    if pruner.metric not in curves:
        raise ConfigError(
            f"{task.name} has no curve column {pruner.metric!r}", file=file, key="pruner.metric", choices=curves
        )


def _check_sampler(plan: StudyPlan, file: str) -> None:
    if plan.sampler.name == "cmaes" and len(plan.objectives) > 1:
        raise ConfigError(
            "CMA-ES optimises one objective", file=file, key="sampler.name", choices=["tpe", "gp", "random", "grid"]
        )


def _check_batch(spec: StudyFile, task: Task, file: str) -> None:
    if spec.batch == 1:
        return
    if not isinstance(task, BatchableTask):
        raise ConfigError(
            f"task {task.name!r} has no run_batch: its trials cannot run as one batch", file=file, key="batch"
        )
    if spec.batch > spec.parallel:
        raise ConfigError(f"batch ({spec.batch}) cannot exceed parallel ({spec.parallel})", file=file, key="batch")


def _plans(spec: StudyFile, file: str, default_name: str) -> list[StudyPlan]:
    try:
        task = get_task(spec.task)
    except UnknownTaskError:
        raise ConfigError(f"unknown task {spec.task!r}", file=file, key="task", choices=task_names()) from None
    objectives = spec.objective if isinstance(spec.objective, list) else [spec.objective]
    if not objectives:
        raise ConfigError("give at least one objective", file=file, key="objective")
    sampler = spec.sampler if isinstance(spec.sampler, SamplerSpec) else SamplerSpec(name=spec.sampler)
    pruner = spec.pruner if isinstance(spec.pruner, PrunerSpec) else PrunerSpec(name=spec.pruner)
    _check_metrics(spec, task, objectives, pruner, file)
    _check_batch(spec, task, file)
    for key, values in spec.sweep.items():
        if not values:
            raise ConfigError("a sweep axis needs at least one value", file=file, key=f"sweep.{key}")
        if key in spec.space or key in spec.params:
            raise ConfigError("a swept param cannot also be fixed or searched", file=file, key=f"sweep.{key}")
    base = spec.name or default_name
    plans = []
    for combo in itertools.product(*[[(k, v) for v in vs] for k, vs in spec.sweep.items()]):
        fixed = {**spec.params, **dict(combo)}
        _check_space(spec, task, fixed, file)
        name = base + (f"[{','.join(f'{k}={json.dumps(v)}' for k, v in combo)}]" if combo else "")
        baselines = []
        for i, b in enumerate(spec.baselines):
            raw = {k: v for k, v in {**fixed, **b.params}.items() if v is not None}
            _check_params(task, raw, file, b.params, where=f"baselines.{i}.params")
            params = validate_params(task, raw)
            baselines.append(Cell(run_id(task, params), task.name, params, i + 1))
        plan = StudyPlan(
            name=name,
            source=file,
            description=spec.description,
            task=task.name,
            fixed=fixed,
            space=dict(spec.space),
            objectives=objectives,
            sampler=sampler,
            pruner=pruner,
            n_trials=0,
            parallel=spec.parallel,
            max_failed=0,
            baselines=baselines,
            report=list(spec.report),
            mode=spec.mode,
            batch=spec.batch,
        )
        n_trials = spec.n_trials
        if sampler.name == "grid":
            size = math.prod(len(v) for v in plan.grid().values())
            n_trials = min(n_trials or size, size)
        if n_trials is None:
            raise ConfigError("give the number of trials", file=file, key="n_trials")
        object.__setattr__(plan, "n_trials", n_trials)
        object.__setattr__(plan, "max_failed", spec.max_failed or n_trials)
        _check_sampler(plan, file)
        plans.append(plan)
    return plans


def load_study(source: str | Path | dict[str, Any], name: str | None = None) -> list[StudyPlan]:
    """Load and validate a study file (or an already-parsed mapping): one plan per sweep combination.

    This model knows nothing of Optuna: the options of a sampler or pruner are checked against the
    library by runner.tune.optuna_adapter.load_plans, which is what the tuner and the CLI call."""
    file, raw, default_name = read_source(source, "study", name)
    if not isinstance(raw, dict):
        raise ConfigError(
            "a study file must be a mapping with task, space and objective",
            file=file,
            choices=list(StudyFile.model_fields),
        )
    try:
        spec = StudyFile.model_validate(raw)
    except ValidationError as exc:
        raise _structure_error(exc, file, raw) from None
    return _plans(spec, file, default_name)
