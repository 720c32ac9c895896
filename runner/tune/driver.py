"""Optuna studies driven from the driver with ask/tell; every trial is a run in the store.

The driver owns the study. It asks trials, turns each into a cell (fixed + sampled params, a normal
run_id), runs the cells not yet in the store on the executor and tells the results; when to ask and
tell (`parallel` trials always in flight, or reproducible batches) is `runner.tune.schedule`'s.
Records are persisted on the grid's flush policy, by count and by time. Workers never touch the
Optuna storage; intermediate values reach the pruner through `runner.execute.report_channel`.

Runs -> trial states: ok -> COMPLETE with the objective metrics (a NaN metric -> FAIL unless the
objective has a nan_value); diverged -> PRUNED (the objective is undefined; spec 002 G2);
pruned -> PRUNED; failed, timeout, or params the task rejects -> FAIL. A trial whose run is already
in the store (ok/diverged, and failed/timeout unless retry_failed) is told from the stored row
without running again; several trials of one batch with the same params share one run.

Resume: RUNNING trials found at start were left by a driver that died; they are told FAIL and their
params enqueued, so they are asked again (and told from the store if their run had finished). A
trial is told as soon as its run finishes, before the run's part file is written; a driver killed
in between leaves finished trials whose run is not in the store, and the next start runs those
cells again (`repair_runs`: a run is a function of its params). A worker lost while the driver lives
is handled by the executor, which runs the lost runs again. One driver per study at a time.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from runner.api import execute_cells, make_executor, member_row, plan
from runner.execute.base import Executor, ForecastsWork, ReportChannel, ReportSpec
from runner.execute.progress import Progress
from runner.grid.cells import Cell
from runner.store import ResultStore
from runner.store.columns import MEMBER_SCHEMA
from runner.store.trials import write_trials
from runner.tune.optuna_adapter import (
    JOURNAL_NAME,
    distributions,
    grid_size,
    load_plans,
    open_storage,
    open_study,
    quiet,
    recover,
    tell,
    trial_states,
)
from runner.tune.pruning import PruningHub
from runner.tune.schedule import TrialSchedule
from runner.tune.spec import StudyPlan
from runner.tune.trials import TuneReport, missing_rows, run_status, trial_run_id
from tasks.status import PRUNED, is_settled

__all__ = ["JOURNAL_NAME", "TuneReport", "run_study", "tune", "with_overrides"]

EXECUTOR_OPTIONS = ("address", "workers", "threads", "timeout_s", "grace_s")


class StudyDriver:
    def __init__(
        self,
        p: StudyPlan,
        store: ResultStore,
        storage: str | None,
        executor: str | Executor,
        options: dict[str, Any],
        retry_failed: bool,
        flush_s: float = 2.0,
    ) -> None:
        self.p, self.store, self.retry_failed, self.flush_s = p, store, retry_failed, flush_s
        storage_obj, self.label = open_storage(storage, store)
        self.study = open_study(p, storage_obj)
        self.report = TuneReport(p.name, self.label, p.n_trials, recovered=recover(self.study))
        self.rows: list[dict[str, Any]] = []  # trials/ rows not written yet; appended by the teller thread too
        self.rows_lock = threading.Lock()
        self.new_members: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()
        self.known: dict[str, dict[str, Any]] = {}  # settled runs: run_id -> its row (what a trial is told)
        self.bar = Progress(0, p.name, enabled=False)
        old = store.read_members()
        self.members = {
            r for g, r in zip(old["grid"].to_pylist(), old["run_id"].to_pylist(), strict=True) if g == p.name
        }
        self.hub = PruningHub()
        self.owned = isinstance(executor, str)
        self.executor = make_executor(executor, **options)
        self.channel: ReportChannel | None = None
        if p.pruning:
            log = p.pruner.log if p.pruner.log is not None else p.objectives[0].log
            spec = ReportSpec(str(p.pruner.metric), log, p.pruner.every)
            self.channel = self.executor.report_channel(self.hub.judge, spec)

    def member(self, cell: Cell) -> None:
        if cell.run_id not in self.members:
            self.members.add(cell.run_id)
            self.new_members.append(
                {**member_row(cell, self.p.name, "study", self.p.source), "added": datetime.now(UTC)}
            )

    def add_row(self, row: dict[str, Any]) -> None:
        with self.rows_lock:
            self.rows.append(row)

    def flush(self) -> None:
        with self.rows_lock:
            rows, self.rows = self.rows, []
        write_trials(self.store, rows)
        if self.new_members:
            self.store.write_part(pa.Table.from_pylist(self.new_members, schema=MEMBER_SCHEMA), "members")
        self.new_members.clear()
        self.last_flush = time.monotonic()

    def flush_if_due(self) -> None:
        """trials/ and members/ rows every `flush_s` seconds (runs have execute_cells' own policy)."""
        if time.monotonic() - self.last_flush >= self.flush_s:
            self.flush()

    @contextmanager
    def expecting(self, left: Callable[[], int]) -> Iterator[None]:
        """While the executor runs, it may know how many runs are still to come (`left`): a warm start
        then starts Ray only once that pays, so a short study never starts it (runner.execute.warm)."""
        forecasting = self.executor if isinstance(self.executor, ForecastsWork) else None
        if forecasting is not None:
            forecasting.expect_items(left)
        try:
            yield
        finally:
            if forecasting is not None:
                forecasting.expect_items(None)

    def run_baselines(self, progress: bool) -> None:
        for c in self.p.baselines:
            self.member(c)
        todo, _, _ = plan(self.p.baselines, self.store, self.retry_failed)
        if todo:
            # the baselines, then the trials: an upper bound of what is left is good enough to decide on
            with self.expecting(lambda: len(todo) + self.p.n_trials):
                execute_cells(todo, self.store, self.executor, f"{self.p.name} baselines", progress=progress)

    def known_runs(self) -> dict[str, dict[str, Any]]:
        metrics = list(dict.fromkeys([o.metric for o in self.p.objectives] + self.p.report))
        rows = self.store.read_runs(self.p.task, columns=["status", *metrics]).to_pylist()
        return {r["run_id"]: r for r in rows if is_settled(r["status"], self.retry_failed)}

    def ask(self, n: int) -> tuple[list[tuple[Any, Cell]], int]:
        """n new trials as (trial, cell); trials whose params the task rejects are told FAIL at once."""
        TrialState = trial_states()  # noqa: N806 - the enum, under its usual name

        asked, rejected = [], 0
        dists = distributions(self.p)
        for _ in range(n):
            trial = self.study.ask(dists)
            try:
                cell = self.p.cell(dict(trial.params))
            except (ValidationError, TypeError, ValueError) as exc:
                trial.set_user_attr("note", f"params rejected by the task: {str(exc).splitlines()[0]}")
                tell(self.study, trial, state=TrialState.FAIL)
                rejected += 1
                continue
            asked.append((trial, cell))
        return asked, rejected

    def repair_runs(self, progress: bool) -> None:
        """Run again the cells of finished trials whose run is not in the store: a driver killed after
        telling a trial but before its flush. Pruned trials are left alone (a pruned run is not done
        either way; it runs again when asked)."""
        stored = set(self.store.read_runs(self.p.task, columns=["status"])["run_id"].to_pylist())
        lost: dict[str, Cell] = {}
        for t in self.study.get_trials(deepcopy=False):
            if t.state.is_finished() and run_status(t) not in (None, PRUNED):  # None: never ran (rejected, recovered)
                cell = self.p.cell(dict(t.params))
                if cell.run_id not in stored:
                    lost[cell.run_id] = cell
        if lost:
            execute_cells(
                list(lost.values()),
                self.store,
                self.executor,
                f"{self.p.name} (runs of told trials)",
                progress=progress,
            )
            self.report.repaired = len(lost)

    def loop(self, progress: bool, flush_s: float, flush_every: int = 256) -> None:
        p = self.p
        self.known = self.known_runs()
        schedule = TrialSchedule(self)
        self.bar = Progress(max(p.n_trials - schedule.done, 0), p.name, enabled=progress)
        try:
            with self.expecting(schedule.left), self.channel.batch() if self.channel is not None else nullcontext():
                execute_cells(
                    schedule.cells(),
                    self.store,
                    self.executor,
                    p.name,
                    progress=False,
                    flush_every=flush_every,
                    flush_s=flush_s,
                    channel=self.channel,
                    sink=schedule.finished,
                )
        except KeyboardInterrupt:
            schedule.close()  # the tells already decided land first
            self.report.recovered += recover(self.study)  # leave nothing RUNNING
            raise
        finally:
            schedule.close()
            self.bar.close()

    def close(self) -> None:
        """Write what is buffered (plus any finished trial trials/ lacks), release Ray resources."""
        written = {r["number"] for r in self.rows}
        rest = [t for t in self.study.get_trials(deepcopy=False) if t.number not in written]
        self.rows.extend(missing_rows(self.store, self.p, self.label, rest))
        self.flush()
        if self.channel is not None:
            self.channel.close()
        if self.owned:
            self.executor.close()

    def summarise(self) -> None:
        TrialState = trial_states()  # noqa: N806 - the enum, under its usual name

        p, trials = self.p, self.study.get_trials(deepcopy=False)
        self.report.states = Counter(t.state.name for t in trials if t.state != TrialState.WAITING)
        metrics = list(dict.fromkeys([o.metric for o in p.objectives] + p.report + ["flops"]))
        runs = {r["run_id"]: r for r in self.store.read_runs(p.task, columns=["status", *metrics]).to_pylist()}
        if any(t.state == TrialState.COMPLETE for t in trials):
            best = self.study.best_trials if len(p.objectives) > 1 else [self.study.best_trial]
            seen: set[str] = set()
            for t in sorted(best, key=lambda t: t.number):
                rid = trial_run_id(p, t)
                if rid in seen or len(seen) >= 20:
                    continue  # one line per distinct run (a Pareto front repeats integer points)
                seen.add(rid or "")
                run = runs.get(rid or "", {})
                self.report.best.append(
                    {
                        "number": t.number,
                        "values": t.values,
                        "params": t.params,
                        "run_id": rid,
                        "metrics": {m: run.get(m) for m in metrics},
                    }
                )
        for c in p.baselines:
            run = runs.get(c.run_id, {})
            self.report.baselines.append(
                {
                    "run_id": c.run_id,
                    "status": run.get("status", "missing"),
                    "metrics": {m: run.get(m) for m in metrics},
                }
            )


def run_study(
    p: StudyPlan,
    results: str | Path = "results",
    executor: str | Executor = "ray",
    *,
    storage: str | None = None,
    retry_failed: bool = False,
    progress: bool = True,
    flush_s: float = 2.0,
    flush_every: int = 256,
    **executor_options: Any,
) -> TuneReport:
    """Run one study until n_trials of its trials are finished (COMPLETE + PRUNED)."""
    quiet()
    t0 = time.monotonic()
    store = ResultStore(results)
    options = {k: v for k, v in executor_options.items() if v is not None}
    driver = StudyDriver(p, store, storage, executor, options, retry_failed, flush_s)
    write_trials(store, missing_rows(store, p, driver.label, driver.study.get_trials(deepcopy=False)))
    try:
        driver.repair_runs(progress)
        driver.run_baselines(progress)
        driver.loop(progress, flush_s, flush_every)
    finally:
        driver.close()
    driver.summarise()
    driver.report.wall_s = time.monotonic() - t0
    return driver.report


def with_overrides(
    p: StudyPlan, n_trials: int | None = None, parallel: int | None = None, deterministic: bool = False
) -> StudyPlan:
    """A plan with the command line's --n-trials / --parallel / --deterministic (a grid study never
    exceeds its grid)."""
    if n_trials is not None:
        n_trials = min(n_trials, grid_size(p)) if p.sampler.name == "grid" else n_trials
        p = replace(p, n_trials=n_trials, max_failed=max(p.max_failed, n_trials))
    if deterministic:
        p = replace(p, mode="deterministic")
    return replace(p, parallel=parallel, batch=min(p.batch, parallel)) if parallel is not None else p


def tune(
    source: str | Path | dict[str, Any] | list[StudyPlan],
    results: str | Path = "results",
    executor: str | Executor = "ray",
    *,
    n_trials: int | None = None,
    parallel: int | None = None,
    deterministic: bool = False,
    **kwargs: Any,
) -> list[TuneReport]:
    """Run every study of a study file (one per `sweep` combination), sharing one executor."""
    plans = source if isinstance(source, list) else load_plans(source)
    plans = [with_overrides(p, n_trials, parallel, deterministic) for p in plans]
    shared = None
    if executor in ("ray", "auto") and len(plans) > 1:
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in EXECUTOR_OPTIONS}
        executor = shared = make_executor(executor, **options)
    try:
        return [run_study(p, results, executor, **kwargs) for p in plans]
    finally:
        if shared is not None:
            shared.close()
