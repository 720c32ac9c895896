"""Trials and runs: how a run's row becomes a trial state, the `trials/` table, and the tune report.

    trials/part-*.parquet   study, storage, number, state, params_json, values, value, run_id, ...

Rows are derived from the Optuna storage, which stays the source of truth for the study: the driver
writes them in batches and, on start, writes any finished trial a killed driver did not get to
(`missing_rows`). Readers keep the newest row per (storage, study, number).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from runner.execute.report_channel import transform
from runner.store import ResultStore
from runner.store.trials import read_trials
from runner.tune.optuna_adapter import State, TrialInfo
from runner.tune.spec import StudyPlan
from tasks.status import DIVERGED, OK, PRUNED


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def trial_run_id(p: StudyPlan, trial: TrialInfo) -> str | None:
    """The run id of a trial: that of its params' cell (studies of older versions carry it as a user
    attribute); None for a trial without params or with params the task rejects."""
    if "run_id" in trial.user_attrs:
        return str(trial.user_attrs["run_id"])
    if not trial.params:
        return None
    try:
        return p.cell(dict(trial.params)).run_id
    except (ValidationError, TypeError, ValueError):
        return None


def run_status(trial: TrialInfo) -> str | None:
    """The status of a trial's run: a user attribute, written only when the trial is not COMPLETE
    (COMPLETE means an ok run; every attribute is one more write, fsynced, to a journal file)."""
    if "run_status" in trial.user_attrs:
        return str(trial.user_attrs["run_status"])
    return OK if trial.state == State.COMPLETE else None


def fail_reason(trial: TrialInfo) -> str:
    """Why a FAIL trial failed, as the summary groups it: its note (a NaN objective, params the task
    rejected), else its run's status, else that nothing was recorded (a trial left RUNNING by a stopped
    driver, told FAIL at the next start)."""
    note = trial.user_attrs.get("note")
    if note:
        return str(note)
    status = run_status(trial)
    return f"run {status}" if status else "no run recorded (its driver stopped)"


def trial_row(p: StudyPlan, storage: str, trial: TrialInfo, run_id: str | None) -> dict[str, Any]:
    """A trials/ row from a told trial and its run id."""
    values = trial.values
    return {
        "study": p.name,
        "storage": storage,
        "number": trial.number,
        "state": trial.state.value,
        "params_json": json.dumps(trial.params, sort_keys=True, separators=(",", ":")),
        "values": values,
        "value": values[0] if values else None,
        "run_id": run_id,
        "task": p.task,
        "run_status": run_status(trial),
        "note": trial.user_attrs.get("note"),
        "datetime_start": _utc(trial.datetime_start),
        "datetime_complete": _utc(trial.datetime_complete),
        "written": datetime.now(UTC),
    }


def missing_rows(store: ResultStore, p: StudyPlan, storage: str, trials: Iterable[TrialInfo]) -> list[dict[str, Any]]:
    """Rows for finished trials that trials/ does not have yet (a killed driver's last batches)."""
    have = set(read_trials(store, p.name, storage)["number"].to_pylist())
    return [trial_row(p, storage, t, trial_run_id(p, t)) for t in trials if t.state.finished and t.number not in have]


@dataclass
class TuneReport:
    study: str
    storage: str
    n_trials: int
    states: Counter[str] = field(default_factory=Counter)
    counts: Counter[str] = field(default_factory=Counter)  # the runs this command executed, by status
    from_store: int = 0
    skipped_failed: int = 0  # trials told FAIL from a stored failed or timed-out run (not rerun without --retry-failed)
    repaired: int = 0  # runs of told trials that a killed driver had not written, run again at start
    recovered: list[int] = field(default_factory=list)
    stopped_early: str | None = None
    gave_up: bool = False  # stopped at max_failed (the command exits 1)
    fail_reasons: Counter[str] = field(default_factory=Counter)  # FAIL trials by `fail_reason`
    best: list[dict[str, Any]] = field(default_factory=list)
    baselines: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ran(self) -> int:
        """Runs this command executed: its trials', its baselines' and those repaired at start."""
        return sum(self.counts.values())

    def format(self) -> str:
        states = ", ".join(f"{k} {v}" for k, v in sorted(self.states.items())) or "no trials"
        out = [
            f"{self.study}: {states} ({self.n_trials} finished wanted); {self.ran} runs executed, "
            f"{self.from_store} trials told from the store, {self.wall_s:.1f}s"
        ]
        if self.recovered:
            out.append(f"  trials left RUNNING by a stopped driver, told FAIL and asked again: {self.recovered}")
        if self.repaired:
            out.append(f"  runs of told trials missing from the store (a killed driver), run again: {self.repaired}")
        if self.stopped_early:
            out.append(f"  stopped early: {self.stopped_early}")
        if self.fail_reasons:
            reasons = "; ".join(f"{reason} ({n})" for reason, n in self.fail_reasons.most_common())
            out.append(f"  FAIL trials by reason: {reasons}")
        for b in self.best:
            out.append(
                f"  best trial {b['number']}: values {_fmt(b['values'])} params {json.dumps(b['params'])} "
                f"run {b['run_id']} {_fmt(b['metrics'])}"
            )
        for b in self.baselines:
            params = f" params {json.dumps(b['params'], sort_keys=True)}" if b.get("params") else ""
            out.append(f"  baseline run {b['run_id']} ({b['status']}){params}: {_fmt(b['metrics'])}")
        out.append(f"  storage {self.storage}")
        return "\n".join(out)


def _fmt(obj: Any) -> str:
    if isinstance(obj, dict):
        return " ".join(f"{k}={_fmt(v)}" for k, v in obj.items())
    if isinstance(obj, list):
        return "[" + ", ".join(_fmt(v) for v in obj) + "]"
    return f"{obj:.5g}" if isinstance(obj, float) else str(obj)


def objective_values(p: StudyPlan, row: dict[str, Any]) -> list[float] | None:
    out = []
    for obj in p.objectives:
        v = row.get(obj.metric)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            if obj.nan_value is None:
                return None
            out.append(obj.nan_value)
        else:
            out.append(transform(float(v), obj.log))
    return out


def verdict(p: StudyPlan, row: dict[str, Any]) -> tuple[State, list[float] | None, str | None]:
    """(trial state, values, note) for a run's row."""
    status = row["status"]
    if status == OK:
        values = objective_values(p, row)
        return (State.COMPLETE, values, None) if values is not None else (State.FAIL, None, "objective metric is NaN")
    if status in (DIVERGED, PRUNED):
        return State.PRUNED, None, "run diverged" if status == DIVERGED else None
    return State.FAIL, None, f"run {status}"
