"""Study files: load and validate an Optuna study (task, fixed params, search space, objectives,
sampler, pruner, budget) into `StudyPlan`s, one per combination of `sweep` values.

Everything is checked before any work starts (runner.tune.study_checks), and the first problem becomes a
ConfigError naming the file, the key and the valid choices, as for grid files. The space is checked
against the task's params at each bound (and every categorical choice), so a typo or an out-of-range
bound fails here, not in trial 37.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from runner.errors import ConfigError, check_name
from runner.grid.cells import Cell
from runner.grid.identity import run_id, validate_params
from runner.grid.model import read_source
from runner.tune.space import AnySpaceParam, CategoricalParam, FloatVectorParam, IntParam, element_name
from runner.tune.study_checks import check_batch, check_metrics, check_params, check_space, structure_error
from runner.tune.study_file import Objective, PrunerSpec, SamplerSpec, StudyFile
from tasks import UnknownTaskError, get_task, task_names


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

    @property
    def reported_log(self) -> bool:
        """Whether the values a run reports to the pruner are log10 of its metric (default: as the first
        objective's)."""
        return self.pruner.log if self.pruner.log is not None else self.objectives[0].log

    @property
    def reported_name(self) -> str:
        """What a trial's intermediate values are, as a plot's axis names them."""
        return ("log10 " if self.reported_log else "") + str(self.pruner.metric)

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


def _check_sampler(plan: StudyPlan, file: str) -> None:
    if plan.sampler.name == "cmaes" and len(plan.objectives) > 1:
        raise ConfigError(
            "CMA-ES optimises one objective", file=file, key="sampler.name", choices=["tpe", "gp", "random", "grid"]
        )


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
    check_metrics(spec, task, objectives, pruner, file)
    check_batch(spec, task, file)
    for key, values in spec.sweep.items():
        if not values:
            raise ConfigError("a sweep axis needs at least one value", file=file, key=f"sweep.{key}")
        if key in spec.space or key in spec.params:
            raise ConfigError("a swept param cannot also be fixed or searched", file=file, key=f"sweep.{key}")
    base = check_name(spec.name or default_name, file, "name" if spec.name else None)
    plans = []
    for combo in itertools.product(*[[(k, v) for v in vs] for k, vs in spec.sweep.items()]):
        fixed = {**spec.params, **dict(combo)}
        check_space(spec, task, fixed, file)
        name = base + (f"[{','.join(f'{k}={json.dumps(v)}' for k, v in combo)}]" if combo else "")
        baselines = []
        for i, b in enumerate(spec.baselines):
            raw = {k: v for k, v in {**fixed, **b.params}.items() if v is not None}
            check_params(task, raw, file, b.params, where=f"baselines.{i}.params")
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
        raise structure_error(exc, file, raw) from None
    return _plans(spec, file, default_name)


def with_overrides(
    p: StudyPlan, n_trials: int | None = None, parallel: int | None = None, deterministic: bool = False
) -> StudyPlan:
    """A plan with the command line's --n-trials / --parallel / --deterministic (a grid study never
    exceeds its grid)."""
    if n_trials is not None:
        n_trials = min(n_trials, math.prod(len(v) for v in p.grid().values())) if p.sampler.name == "grid" else n_trials
        p = replace(p, n_trials=n_trials, max_failed=max(p.max_failed, n_trials))
    if deterministic:
        p = replace(p, mode="deterministic")
    return replace(p, parallel=parallel, batch=min(p.batch, parallel)) if parallel is not None else p
