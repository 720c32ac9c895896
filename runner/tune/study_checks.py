"""A study file checked against its task before anything runs: its structure's first error, every param
at each corner of the space, the metrics and curve columns it names, the sampler's and batch's rules.
Each problem is one ConfigError naming the file, the key and the valid choices."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ValidationError

from runner.errors import ConfigError, did_you_mean, shown
from runner.grid.identity import ParamValueError, validate_params
from runner.grid.model import params_error
from runner.tune.space import (
    MAX_GRID_POINTS,
    AnySpaceParam,
    CategoricalParam,
    FloatParam,
    FloatVectorParam,
    IntParam,
    extremes,
    first_point,
    grid_points,
)
from runner.tune.study_file import RUN_METRICS, Baseline, Objective, PrunerSpec, SamplerSpec, StudyFile
from tasks import Task
from tasks.base import is_batchable


def structure_error(exc: ValidationError, file: str, raw: dict[str, Any]) -> ConfigError:
    errors = exc.errors()
    # Of a union's alternatives, the literal one says most ("should be 'tpe', 'cmaes', ...") where a name
    # was given. A misspelt key shows up twice (the required key missing, the typo extra): name the typo.
    err = next((e for e in errors if e["type"] == "literal_error" and isinstance(e.get("input"), str)), None)
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
    quoted = "input" in err and err["type"] != "extra_forbidden" and not isinstance(err["input"], dict)
    message = err["msg"] + (f" (got {shown(err['input'])})" if quoted else "")
    if isinstance(err.get("input"), bool) and err["type"] in ("int_type", "float_type"):
        message = f"a bool where a number belongs (got {err['input']})"
    if err["type"] == "extra_forbidden" and choices and loc:
        message = "unknown key" + did_you_mean(loc[-1], choices)
    return ConfigError(message, file=file, key=key, choices=choices)


def check_params(
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


def check_space(spec: StudyFile, task: Task, fixed: dict[str, Any], file: str) -> None:
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
        check_params(task, {**fixed, **point}, file, point, spec.space)


def spec_sampler(spec: StudyFile) -> str:
    return spec.sampler.name if isinstance(spec.sampler, SamplerSpec) else spec.sampler


def check_metrics(spec: StudyFile, task: Task, objectives: list[Objective], pruner: PrunerSpec, file: str) -> None:
    valid = sorted(task.summary_fields) + list(RUN_METRICS)
    for i, obj in enumerate(objectives):
        if obj.metric not in valid:
            key = "objective.metric" if len(objectives) == 1 else f"objective.{i}.metric"
            raise ConfigError(_no_such("metric", obj.metric, task, valid), file=file, key=key, choices=valid)
    for i, metric in enumerate(spec.report):
        if metric not in valid:
            raise ConfigError(_no_such("metric", metric, task, valid), file=file, key=f"report.{i}", choices=valid)
    for i, ref in enumerate(spec.reference):
        targets, given, what = (
            ([o.metric for o in objectives], ref.metric, "metric")
            if ref.metric is not None
            else (sorted(spec.space), ref.param, "param")
        )
        if given not in targets:
            kind = "an objective's metric" if what == "metric" else "a searched param"
            raise ConfigError(
                f"a reference is drawn against {kind}: {given!r} is not one" + did_you_mean(str(given), targets),
                file=file,
                key=f"reference.{i}.{what}",
                choices=targets,
            )
        if what == "metric" and any(o.log for o in objectives if o.metric == given) and ref.value <= 0:
            raise ConfigError(
                f"the objective {given!r} is told as log10: a reference value must be > 0 (got {ref.value})",
                file=file,
                key=f"reference.{i}.value",
            )
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
            _no_such("curve column", pruner.metric, task, curves), file=file, key="pruner.metric", choices=curves
        )


def _no_such(what: str, name: str, task: Task, valid: list[str]) -> str:
    """ "deep_linear has no metric 'iters_to_tl' (did you mean 'iters_to_tol'?)": the closest valid name, as
    the grid file's errors give it."""
    return f"{task.name} has no {what} {name!r}" + did_you_mean(name, valid)


def check_batch(spec: StudyFile, task: Task, file: str) -> None:
    if spec.batch == 1:
        return
    if not is_batchable(task):
        raise ConfigError(
            f"task {task.name!r} has no run_batch: its trials cannot run as one batch", file=file, key="batch"
        )
    if spec.batch > spec.parallel:
        raise ConfigError(f"batch ({spec.batch}) cannot exceed parallel ({spec.parallel})", file=file, key="batch")
