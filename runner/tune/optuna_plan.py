"""A plan's Optuna objects: its sampler, pruner and distributions, built (and checked) from a StudyPlan.
Part of the tuner's door to Optuna (runner.tune.optuna_adapter)."""

from __future__ import annotations

import inspect
import math
import warnings
from pathlib import Path
from typing import Any

from runner.errors import ConfigError
from runner.tune.space import CategoricalParam, FloatParam, FloatVectorParam, IntParam, element_name
from runner.tune.spec import StudyPlan, load_study

# Seeds of one start of a study: its own sampler's seed + SEEDS_PER_START * (trials it had when started),
# its ask processes' the next ones. A sampler seeded alike draws the same points: without the offset a
# resumed or grown study would ask for its first trials' params again.
SEEDS_PER_START = 1000


# A study file's sampler and pruner names -> Optuna's classes (optuna.samplers, optuna.pruners)
_SAMPLERS = {
    "tpe": "TPESampler",
    "cmaes": "CmaEsSampler",
    "gp": "GPSampler",
    "grid": "GridSampler",
    "random": "RandomSampler",
}
_PRUNERS = {
    "nop": "NopPruner",
    "median": "MedianPruner",
    "successive_halving": "SuccessiveHalvingPruner",
    "hyperband": "HyperbandPruner",
}


def _sampler_class(name: str) -> Any:
    import optuna.samplers

    return getattr(optuna.samplers, _SAMPLERS[name])


def _pruner_class(name: str) -> Any:
    import optuna.pruners

    return getattr(optuna.pruners, _PRUNERS[name])


def make_sampler(p: StudyPlan, seed_offset: int = 0) -> Any:
    opts, seed, cls = dict(p.sampler.options), p.sampler.seed, _sampler_class(p.sampler.name)
    seed = None if seed is None else (seed + seed_offset) % 2**32
    if p.sampler.name == "tpe":
        # Batched asks: without the constant liar every trial of a batch would land on one point.
        opts.setdefault("constant_liar", p.parallel > 1)
    if p.sampler.name == "cmaes" and "x0" not in opts:
        # CMA-ES centres its first generation on the vectors' `start` (e.g. D-Minv's coefficients, all 1)
        x0 = {
            element_name(n, i): v
            for n, q in p.space.items()
            if isinstance(q, FloatVectorParam) and q.start is not None
            for i, v in enumerate(q.start_values())
        }
        if x0:
            # CMA-ES wants every numeric param in x0: the others at Optuna's own default, the middle.
            middle = {
                n: math.sqrt(q.low * q.high) if q.log else (q.low + q.high) / 2
                for n, q in p.space.items()
                if isinstance(q, FloatParam | IntParam)
            }
            opts["x0"] = {**middle, **x0}
    if p.sampler.name == "grid":
        return cls(p.grid(), seed=seed, **opts)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # GPSampler and some options are marked experimental
        return cls(seed=seed, **opts)


def make_pruner(p: StudyPlan) -> Any:
    return _pruner_class(p.pruner.name)(**p.pruner.options)


def distributions(plan: StudyPlan) -> dict[str, Any]:
    """The Optuna distributions of a plan's search space."""
    import optuna.distributions as d

    out: dict[str, Any] = {}
    for name, p in plan.space.items():
        if isinstance(p, FloatVectorParam):
            for i in range(p.size):
                out[element_name(name, i)] = d.FloatDistribution(p.low, p.high, log=p.log)
            continue
        if isinstance(p, CategoricalParam):
            out[name] = d.CategoricalDistribution(p.choices)
        elif isinstance(p, IntParam):
            out[name] = d.IntDistribution(p.low, p.high, log=p.log, step=p.step)
        else:
            out[name] = d.FloatDistribution(p.low, p.high, log=p.log, step=p.step)
    return out


def grid_size(p: StudyPlan) -> int:
    return math.prod(len(v) for v in p.grid().values())


def _check_option_types(cls: Any, options: dict[str, Any], file: str, key: str) -> None:
    """A bool given for an option the class types as a number (`n_startup_trials: true`): Python would
    take it as 1. The classes' annotations say which options are numbers."""
    parameters = inspect.signature(cls).parameters
    for name, value in options.items():
        wanted = str(parameters[name].annotation) if name in parameters else ""
        if isinstance(value, bool) and "bool" not in wanted and ("int" in wanted or "float" in wanted):
            raise ConfigError(
                f"a bool where a number belongs (got {value}; {cls.__name__} takes {wanted})",
                file=file,
                key=f"{key}.options.{name}",
            )


def check_plan(plan: StudyPlan) -> StudyPlan:
    """Build the plan's sampler and pruner now, so a bad option fails before anything runs (with the
    options the class takes), not after the first batch."""
    for make, cls, key, options in (
        (make_sampler, _sampler_class(plan.sampler.name), "sampler", plan.sampler.options),
        (make_pruner, _pruner_class(plan.pruner.name), "pruner", plan.pruner.options),
    ):
        _check_option_types(cls, options, plan.source, key)
        try:
            make(plan)
        except (TypeError, ValueError) as exc:
            valid = [n for n in inspect.signature(cls).parameters if n not in ("self", "seed", "search_space")]
            raise ConfigError(
                f"bad option for {cls.__name__}: {exc}", file=plan.source, key=f"{key}.options", choices=valid
            ) from None
    return plan


def load_plans(source: str | Path | dict[str, Any], name: str | None = None) -> list[StudyPlan]:
    """`load_study` plus the library's own check of sampler and pruner options."""
    return [check_plan(p) for p in load_study(source, name)]
