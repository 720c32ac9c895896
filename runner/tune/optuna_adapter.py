"""Optuna objects from a study plan: sampler, pruner, storage, the study itself, and recovery.

Used as Optuna's authors intend: `create_study(load_if_exists=True)`, its samplers and pruners,
`JournalStorage(JournalFileBackend)` for the default local storage, `RDBStorage` for a URL,
`enqueue_trial` to ask a lost trial's params again.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

from runner.errors import ConfigError, redact
from runner.store import ResultStore
from runner.tune.space import (
    CategoricalParam,
    FloatParam,
    FloatVectorParam,
    IntParam,
    element_name,
)
from runner.tune.spec import StudyPlan, load_study

JOURNAL_NAME = "optuna.journal"


def sampler_class(name: str) -> Any:
    import optuna.samplers as s

    return {
        "tpe": s.TPESampler,
        "cmaes": s.CmaEsSampler,
        "gp": s.GPSampler,
        "grid": s.GridSampler,
        "random": s.RandomSampler,
    }[name]


def pruner_class(name: str) -> Any:
    import optuna.pruners as pr

    return {
        "nop": pr.NopPruner,
        "median": pr.MedianPruner,
        "successive_halving": pr.SuccessiveHalvingPruner,
        "hyperband": pr.HyperbandPruner,
    }[name]


def make_sampler(p: StudyPlan) -> Any:
    opts, seed, cls = dict(p.sampler.options), p.sampler.seed, sampler_class(p.sampler.name)
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
    return pruner_class(p.pruner.name)(**p.pruner.options)


def grid_size(p: StudyPlan) -> int:
    return math.prod(len(v) for v in p.grid().values())


def open_storage(storage: str | None, store: ResultStore) -> tuple[Any, str]:
    """(Optuna storage, its label in trials/). Default: a journal file in the (local) results root;
    a URL is an RDB (PostgreSQL, MySQL, SQLite); any other string is a journal file path."""
    from optuna.storages import JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

    if storage is not None and "://" in storage:
        try:
            return RDBStorage(storage), redact(storage)
        except Exception as exc:  # noqa: BLE001 - a driver or connection error is the user's URL
            raise ConfigError(
                f"cannot open storage {redact(storage)}: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}",
                key="--storage",
            ) from None
    if storage is None and not store.local:
        raise ConfigError(
            "an object-store results root needs --storage (an RDB URL or a journal file path)", key="--storage"
        )
    path = Path(storage) if storage is not None else Path(store.base) / JOURNAL_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    # The lock file is Optuna's default (optuna-dashboard uses the same); a driver SIGKILLed while
    # appending leaves it behind, and the next driver breaks it after 5 s instead of 30.
    backend = JournalFileBackend(str(path), lock_obj=JournalFileSymlinkLock(str(path), grace_period=5))
    return JournalStorage(backend), "journal:" + (JOURNAL_NAME if storage is None else str(path.resolve()))


def open_study(p: StudyPlan, storage: Any) -> Any:
    """Create the study, or load it; a name reused for another task or direction is an error."""
    import optuna

    study = optuna.create_study(
        storage=storage,
        sampler=make_sampler(p),
        pruner=make_pruner(p),
        study_name=p.name,
        directions=p.directions,
        load_if_exists=True,
    )
    have = [d.name.lower() for d in study.directions]
    if have != p.directions:
        raise ConfigError(
            f"study {p.name!r} already exists in this storage with directions {have}", file=p.source, key="objective"
        )
    info = study.user_attrs.get("convgrid")
    if info is None:
        study.set_user_attr("convgrid", {"task": p.task, "source": p.source, "fixed": p.fixed})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # ExperimentalWarning; the names label the dashboard's axes
            study.set_metric_names([("log10 " if o.log else "") + o.metric for o in p.objectives])
    elif info.get("task") != p.task:
        raise ConfigError(
            f"study {p.name!r} already exists in this storage for task {info.get('task')!r}", file=p.source, key="task"
        )
    return study


def tell(study: Any, trial: Any, values: list[float] | None = None, state: Any = None) -> Any:
    """The told trial (a FrozenTrial), or None when the grid sampler stopped the study."""
    try:
        return study.tell(trial, values, state=state)
    except RuntimeError as exc:
        # GridSampler calls study.stop() once its grid is covered, which ask/tell cannot take; the
        # trial is told by then, and the driver stops on `is_exhausted`.
        if "Study.stop" not in str(exc):
            raise
        return None


def recover(study: Any) -> list[int]:
    """FAIL the trials a stopped driver left RUNNING and enqueue their params to ask them again."""
    from optuna.trial import TrialState

    numbers = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        tell(study, t.number, state=TrialState.FAIL)
        if t.params:
            study.enqueue_trial(dict(t.params), user_attrs={"retry_of": t.number})
        numbers.append(t.number)
    return numbers


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


def check_plan(plan: StudyPlan) -> StudyPlan:
    """Build the plan's sampler and pruner now, so a bad option fails before anything runs (with the
    options the class takes), not after the first batch."""
    import inspect

    for make, cls, key in (
        (make_sampler, sampler_class(plan.sampler.name), "sampler"),
        (make_pruner, pruner_class(plan.pruner.name), "pruner"),
    ):
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


def trial_states() -> Any:
    """optuna.trial.TrialState, handed out here so that the rest of the tuner never imports Optuna."""
    from optuna.trial import TrialState

    return TrialState


def quiet() -> None:
    """Optuna's per-trial INFO lines would drown the progress bar; warnings still show."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
