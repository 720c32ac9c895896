"""The tuner's one door to Optuna: everything the rest of runner/tune needs, as typed functions and
one small class, so that nothing else imports Optuna or touches one of its objects (a test checks both).

Used as Optuna's authors intend: `create_study(load_if_exists=True)`, its samplers and pruners,
`JournalStorage(JournalFileBackend)` for the default local storage, `RDBStorage` for a URL, ask/tell,
`trial.report` / `should_prune`, `enqueue_trial` to ask a lost trial's params again.

    storage = open_storage(args.storage, store)          # StudyStorage: Optuna's object and its label
    study = Study.open(plan, storage)                     # created or loaded, checked against the plan
    asked = study.ask()                                   # Asked: number, params (the trial stays here)
    info = study.tell(asked, values, State.COMPLETE)      # TrialInfo: a plain, frozen view of the trial
"""

from __future__ import annotations

import inspect
import json
import math
import os
import signal
import warnings
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import ConfigError, redact
from runner.tune.journal_lock import journal_lock
from runner.tune.journal_tail import repair_tail
from runner.tune.space import CategoricalParam, FloatParam, FloatVectorParam, IntParam, element_name
from runner.tune.spec import StudyPlan, load_study

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from runner.store import ResultStore

JOURNAL_NAME = "optuna.journal"


class State(StrEnum):
    """A trial's state, by Optuna's names."""

    RUNNING = "RUNNING"
    COMPLETE = "COMPLETE"
    PRUNED = "PRUNED"
    FAIL = "FAIL"
    WAITING = "WAITING"

    @property
    def finished(self) -> bool:
        return self in (State.COMPLETE, State.PRUNED, State.FAIL)


@dataclass(frozen=True)
class TrialInfo:
    """What the tuner reads of a trial."""

    number: int
    state: State
    params: dict[str, Any]
    values: list[float] | None
    user_attrs: dict[str, Any]
    datetime_start: datetime | None
    datetime_complete: datetime | None


@dataclass(eq=False)
class Asked:
    """A trial asked and not yet told: its number and params. The Optuna trial stays inside, for this
    module alone; a trial asked in an ask process (runner.tune.ask_processes) travels as its storage id,
    and the driver makes its Optuna trial only if it needs one (to report to the pruner)."""

    number: int
    params: dict[str, Any]
    _trial: Any = field(default=None, repr=False)
    _id: int = field(default=-1, repr=False)


@dataclass(frozen=True)
class AskServer:
    """What an ask process needs to ask trials of a study (`serve_asks`): the storage to open (a journal's
    path or an RDB's URL), the study's name, a sampler of its own and the search space. Pickles."""

    study_name: str
    _where: str = field(repr=False)
    _sampler: Any = field(repr=False)
    _distributions: dict[str, Any] = field(repr=False)


@dataclass(frozen=True)
class StudyStorage:
    """An Optuna storage, and its label in trials/ (credentials redacted)."""

    label: str
    _storage: Any = field(repr=False)
    _where: str = field(repr=False)  # how another process opens it: a journal's path, an RDB's URL


def _info(trial: Any) -> TrialInfo:
    return TrialInfo(
        trial.number,
        State(trial.state.name),
        dict(trial.params),
        list(trial.values) if trial.values is not None else None,
        dict(trial.user_attrs),
        trial.datetime_start,
        trial.datetime_complete,
    )


def _optuna_state(state: State) -> Any:
    from optuna.trial import TrialState

    return TrialState[state.value]


# ---- samplers and pruners -----------------------------------------------------------------------
def _sampler_class(name: str) -> Any:
    import optuna.samplers as s

    return {
        "tpe": s.TPESampler,
        "cmaes": s.CmaEsSampler,
        "gp": s.GPSampler,
        "grid": s.GridSampler,
        "random": s.RandomSampler,
    }[name]


def _pruner_class(name: str) -> Any:
    import optuna.pruners as pr

    return {
        "nop": pr.NopPruner,
        "median": pr.MedianPruner,
        "successive_halving": pr.SuccessiveHalvingPruner,
        "hyperband": pr.HyperbandPruner,
    }[name]


# Seeds of one start of a study: its own sampler's seed + SEEDS_PER_START * (trials it had when started),
# its ask processes' the next ones. A sampler seeded alike draws the same points: without the offset a
# resumed or grown study would ask for its first trials' params again.
SEEDS_PER_START = 1000


def _make_sampler(p: StudyPlan, seed_offset: int = 0) -> Any:
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


def _make_pruner(p: StudyPlan) -> Any:
    return _pruner_class(p.pruner.name)(**p.pruner.options)


def _distributions(plan: StudyPlan) -> dict[str, Any]:
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
        (_make_sampler, _sampler_class(plan.sampler.name), "sampler", plan.sampler.options),
        (_make_pruner, _pruner_class(plan.pruner.name), "pruner", plan.pruner.options),
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


# ---- storages -----------------------------------------------------------------------------------
def open_storage(storage: str | None, store: ResultStore) -> StudyStorage:
    """Default: a journal file in the (local) results root; a URL is an RDB (PostgreSQL, MySQL, SQLite);
    any other string is a journal file path."""
    from optuna.storages import JournalStorage, RDBStorage

    if storage is not None and "://" in storage:
        try:
            return StudyStorage(storage_label(storage, store), RDBStorage(storage), storage)
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
    if path.is_dir():
        raise ConfigError(f"{path} is a folder: give a journal file's path or an RDB URL", key="--storage")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        journal = JournalStorage(_journal_backend(path))  # reads the whole journal once
    except (ValueError, KeyError) as exc:  # JSONDecodeError, UnicodeDecodeError: not an Optuna journal
        # a line before the last is damaged (a journal appended to after a torn line, before the tail was
        # checked: the records after it cannot be trusted to be whole), or the file is no journal at all
        raise ConfigError(
            f"{path} cannot be read as an Optuna journal ({type(exc).__name__}: {str(exc).splitlines()[0]}): "
            "a journal with a damaged line can be moved aside (its studies start again) or have the line cut "
            "by hand; else give a journal file's path (a new one is created) or an RDB URL",
            key="--storage",
        ) from None
    return StudyStorage(storage_label(storage, store), journal, str(path))


def _reopen(where: str) -> Any:
    """The storage of `open_storage` again, in another process."""
    from optuna.storages import JournalStorage, RDBStorage

    return RDBStorage(where) if "://" in where else JournalStorage(_journal_backend(Path(where)))


def _journal_backend(path: Path) -> Any:
    """Optuna's JournalFileBackend, whose every append first checks the file's last line under the
    journal's lock and cuts a torn one (runner.tune.journal_tail): appending after a torn line made
    the journal unreadable for good."""
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

    class RepairingJournal(JournalFileBackend):
        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            # Optuna's own append (one write of whole lines, fsynced), with the tail checked under the lock
            text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
            self._lock.acquire()
            try:
                repair_tail(self._file_path)
                with open(self._file_path, "ab") as handle:
                    handle.write(text.encode("utf-8"))
                    handle.flush()
                    os.fsync(handle.fileno())
            finally:
                self._lock.release()

    # Optuna's lock file and grace; a wait for it says so (runner.tune.journal_lock)
    return RepairingJournal(str(path), lock_obj=journal_lock(str(path), JournalFileSymlinkLock))


def storage_label(storage: str | None, store: ResultStore) -> str:
    """How trials/ rows and a study's lease name a storage (credentials redacted), without opening it."""
    if storage is not None and "://" in storage:
        return redact(storage)
    return "journal:" + (JOURNAL_NAME if storage is None else str(Path(storage).resolve()))


def trial_states(storage: StudyStorage) -> dict[str, Counter[str]]:
    """Study name -> its trials in the storage, counted by state (COMPLETE, PRUNED, FAIL, ...)."""
    import optuna

    out: dict[str, Counter[str]] = {}
    for summary in optuna.get_all_study_summaries(storage._storage, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=storage._storage)
        out[summary.study_name] = Counter(t.state.name for t in study.get_trials(deepcopy=False))
    return out


def quiet() -> None:
    """Optuna's per-trial INFO lines would drown the progress bar; warnings still show."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


# ---- the study ----------------------------------------------------------------------------------
class Study:
    """One Optuna study, created or loaded for a plan."""

    def __init__(self, plan: StudyPlan, study: Any, where: str, seed_offset: int = 0) -> None:
        self.plan, self._study, self._where = plan, study, where
        self._distributions = _distributions(plan)
        self._seed_offset = seed_offset  # of this start's samplers (SEEDS_PER_START)

    @classmethod
    def open(cls, p: StudyPlan, storage: StudyStorage) -> Study:
        """Create the study, or load it; a name reused for another task or direction is an error."""
        import optuna

        study = optuna.create_study(
            storage=storage._storage,
            sampler=_make_sampler(p),
            pruner=_make_pruner(p),
            study_name=p.name,
            directions=p.directions,
            load_if_exists=True,
        )
        have = [d.name.lower() for d in study.directions]
        if have != p.directions:
            raise ConfigError(
                f"study {p.name!r} already exists in this storage with directions {have}",
                file=p.source,
                key="objective",
            )
        info = study.user_attrs.get("convgrid")
        if info is None:
            attrs = {"task": p.task, "source": p.source, "fixed": p.fixed}
            # what the intermediate values are, for the report's plot of them (Optuna has no name for them)
            study.set_user_attr("convgrid", {**attrs, "reported": p.reported_name} if p.pruning else attrs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ExperimentalWarning; the names label the dashboard's axes
                study.set_metric_names([("log10 " if o.log else "") + o.metric for o in p.objectives])
        elif info.get("task") != p.task:
            raise ConfigError(
                f"study {p.name!r} already exists in this storage for task {info.get('task')!r}",
                file=p.source,
                key="task",
            )
        # a study that has trials already continues with samplers seeded for this start (the same for the
        # same history: a resumed study stays reproducible), not replaying the draws of its first start
        offset = SEEDS_PER_START * len(study.get_trials(deepcopy=False))
        if offset:
            study.sampler = _make_sampler(p, offset)
        return cls(p, study, storage._where, offset)

    def ask(self) -> Asked:
        trial = self._study.ask(self._distributions)
        return Asked(trial.number, dict(trial.params), trial, trial._trial_id)

    def ask_servers(self, count: int) -> list[AskServer]:
        """What `count` ask processes need, each with a sampler of its own: the plan's, seeded after this
        start's own (processes seeded alike would propose the same points)."""
        return [
            AskServer(
                self.plan.name, self._where, _make_sampler(self.plan, self._seed_offset + 1 + i), self._distributions
            )
            for i in range(count)
        ]

    def _trial(self, asked: Asked) -> Any:
        if asked._trial is None:  # asked in an ask process: the same trial, through this process's storage
            import optuna

            asked._trial = optuna.trial.Trial(self._study, asked._id)
        return asked._trial

    def set_attr(self, asked: Asked, key: str, value: str) -> None:
        self._study._storage.set_trial_user_attr(asked._id, key, value)

    def tell(
        self, trial: Asked | int, values: list[float] | None = None, state: State = State.COMPLETE
    ) -> TrialInfo | None:
        """Tell a trial (asked, or by number); the told trial, or None when the grid sampler stopped the study."""
        target = trial if not isinstance(trial, Asked) else trial._trial or trial.number
        try:
            frozen = self._study.tell(target, values, state=_optuna_state(state))
        except RuntimeError as exc:
            # GridSampler calls study.stop() once its grid is covered, which ask/tell cannot take; the
            # trial is told by then, and the driver stops on `exhausted`.
            if "Study.stop" not in str(exc):
                raise
            return None
        return _info(frozen)

    def report(self, asked: Asked, value: float, step: int) -> bool:
        """Report an intermediate value; whether the pruner says the trial goes on."""
        trial = self._trial(asked)
        trial.report(value, step)
        return not trial.should_prune()

    def trials(self, states: tuple[State, ...] | None = None) -> list[TrialInfo]:
        wanted = None if states is None else tuple(_optuna_state(s) for s in states)
        return [_info(t) for t in self._study.get_trials(deepcopy=False, states=wanted)]

    def best(self) -> list[TrialInfo]:
        """The best trial (one objective) or the Pareto front (several); empty before any COMPLETE."""
        if not any(t.state == State.COMPLETE for t in self.trials((State.COMPLETE,))):
            return []
        best = self._study.best_trials if len(self.plan.objectives) > 1 else [self._study.best_trial]
        return [_info(t) for t in best]

    def exhausted(self) -> bool:
        """The grid sampler has asked every point of its grid (other samplers never are)."""
        sampler = self._study.sampler
        return bool(getattr(sampler, "is_exhausted", lambda _s: False)(self._study))

    def recover(self) -> list[int]:
        """FAIL the trials a stopped driver left RUNNING and enqueue their params to ask them again."""
        numbers = []
        for t in self.trials((State.RUNNING,)):
            self.tell(t.number, state=State.FAIL)
            if t.params:
                self._study.enqueue_trial(dict(t.params), user_attrs={"retry_of": t.number})
            numbers.append(t.number)
        return numbers


# ---- an ask process (runner.tune.ask_processes) --------------------------------------------------------
ASK = "ask"
READY = "ready"


def serve_asks(conn: Connection, server: AskServer) -> None:
    """An ask process's whole life: open the study, say READY, then answer every ASK on `conn` with an
    `Asked` (its trial stays in the storage, RUNNING, for the driver to tell) or, if asking failed, the
    error's text; end at None or when the driver is gone. Ctrl-C is the driver's to handle: it stops
    the study and then this process, after the ask under way (else a trial could be left half-asked)."""
    import optuna

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet()
    try:
        study = optuna.load_study(
            study_name=server.study_name,
            storage=_reopen(server._where),
            sampler=server._sampler,
            pruner=optuna.pruners.NopPruner(),  # the driver prunes: it sees the runs' values
        )
    except Exception as exc:  # noqa: BLE001 - the driver asks in its own process instead, and says why
        conn.send(f"{type(exc).__name__}: {exc}")
        return
    conn.send(READY)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the driver is gone
        if message != ASK:
            return
        try:
            trial = study.ask(server._distributions)
            answer: Asked | str = Asked(trial.number, dict(trial.params), None, trial._trial_id)
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which asks in its own process
            answer = f"{type(exc).__name__}: {exc}"
        conn.send(answer)
