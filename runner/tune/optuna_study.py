"""One Optuna study behind convgrid's own types: ask, tell, report to the pruner, the trials as
frozen plain views. Part of the tuner's door to Optuna (runner.tune.optuna_adapter).

A trial asked in this process is told, reported and labelled through Optuna's trial object, as
`study.ask` returned it; one asked in an ask process reaches this one as its number (Optuna's
`study.tell` takes one), and its reports and attributes go through the storage's public methods, by
the storage's id of that number (one look-up per trial)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from runner.errors import ConfigError
from runner.tune.optuna_plan import SEEDS_PER_START, distributions, make_pruner, make_sampler
from runner.tune.optuna_storage import StudyStorage
from runner.tune.spec import StudyPlan


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


@dataclass(frozen=True, eq=False)
class Asked:
    """A trial asked and not yet told: its number and params. Asked in this process, Optuna's trial
    (what `study.ask` returned) stays inside, for the adapter alone; asked in an ask process
    (runner.tune.ask_processes: it pickles), the trial is named by its number."""

    number: int
    params: dict[str, Any]
    optuna_trial: Any = field(default=None, repr=False)


@dataclass(frozen=True)
class AskServer:
    """What an ask process needs to ask trials of a study (runner.tune.optuna_asks): the storage to open
    (a journal's path or an RDB's URL), the study's name, a sampler of its own and the search space. Pickles."""

    study_name: str
    where: str = field(repr=False)
    optuna_sampler: Any = field(repr=False)
    optuna_distributions: dict[str, Any] = field(repr=False)


def trial_info(trial: Any) -> TrialInfo:
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


class Study:
    """One Optuna study, created or loaded for a plan."""

    def __init__(self, plan: StudyPlan, study: Any, storage: StudyStorage, seed_offset: int = 0) -> None:
        self.plan, self._study, self._storage = plan, study, storage
        self._distributions = distributions(plan)
        self._seed_offset = seed_offset  # of this start's samplers (SEEDS_PER_START)
        # BaseStorage's public lookups: a trial number -> the storage's id, for reports and attributes
        self._study_id = storage.optuna_storage.get_study_id_from_name(plan.name)
        self._ids: dict[int, int] = {}

    @classmethod
    def open(cls, p: StudyPlan, storage: StudyStorage) -> Study:
        """Create the study, or load it; a name reused for another task or direction is an error."""
        import optuna

        study = optuna.create_study(
            storage=storage.optuna_storage,
            sampler=make_sampler(p),
            pruner=make_pruner(p),
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
            study.sampler = make_sampler(p, offset)
        return cls(p, study, storage, offset)

    def ask(self) -> Asked:
        trial = self._study.ask(self._distributions)
        return Asked(trial.number, dict(trial.params), trial)

    def ask_servers(self, count: int) -> list[AskServer]:
        """What `count` ask processes need, each with a sampler of its own: the plan's, seeded after this
        start's own (processes seeded alike would propose the same points)."""
        return [
            AskServer(
                self.plan.name,
                self._storage.where,
                make_sampler(self.plan, self._seed_offset + 1 + i),
                self._distributions,
            )
            for i in range(count)
        ]

    def _storage_id(self, number: int) -> int:
        found = self._ids.get(number)
        if found is None:
            storage = self._storage.optuna_storage
            found = self._ids[number] = storage.get_trial_id_from_study_id_trial_number(self._study_id, number)
        return found

    def set_attr(self, asked: Asked, key: str, value: str) -> None:
        if asked.optuna_trial is not None:
            asked.optuna_trial.set_user_attr(key, value)
        else:
            self._storage.optuna_storage.set_trial_user_attr(self._storage_id(asked.number), key, value)

    def tell(
        self, trial: Asked | int, values: list[float] | None = None, state: State = State.COMPLETE
    ) -> TrialInfo | None:
        """Tell a trial (asked, or by number); the told trial, or None when the grid sampler stopped the study."""
        number = trial.number if isinstance(trial, Asked) else trial
        # the trial asked here, or its number (Optuna's tell looks the number up in the storage)
        target = trial.optuna_trial if isinstance(trial, Asked) and trial.optuna_trial is not None else number
        try:
            frozen = self._study.tell(target, values, state=_optuna_state(state))
        except RuntimeError as exc:
            # GridSampler calls study.stop() once its grid is covered, which ask/tell cannot take; the
            # trial is told by then, and the driver stops on `exhausted`.
            if "Study.stop" not in str(exc):
                raise
            return None
        self._ids.pop(number, None)
        return trial_info(frozen)

    def report(self, asked: Asked, value: float, step: int) -> bool:
        """Report an intermediate value; whether the pruner says the trial goes on. What Optuna's
        `Trial.report` / `should_prune` do, through public methods: the value into the storage, then
        the study's pruner asked about the trial as stored (the caller, runner.tune.pruning, reports
        each step once)."""
        if asked.optuna_trial is not None:  # asked here: Optuna's own report and verdict
            asked.optuna_trial.report(value, step)
            return not asked.optuna_trial.should_prune()
        storage, trial_id = self._storage.optuna_storage, self._storage_id(asked.number)
        storage.set_trial_intermediate_value(trial_id, step, float(value))
        return not self._study.pruner.prune(self._study, storage.get_trial(trial_id))

    def trials(self, states: tuple[State, ...] | None = None) -> list[TrialInfo]:
        wanted = None if states is None else tuple(_optuna_state(s) for s in states)
        return [trial_info(t) for t in self._study.get_trials(deepcopy=False, states=wanted)]

    def best(self) -> list[TrialInfo]:
        """The best trial (one objective) or the Pareto front (several); empty before any COMPLETE."""
        if not any(t.state == State.COMPLETE for t in self.trials((State.COMPLETE,))):
            return []
        best = self._study.best_trials if len(self.plan.objectives) > 1 else [self._study.best_trial]
        return [trial_info(t) for t in best]

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
