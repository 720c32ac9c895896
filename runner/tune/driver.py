"""Optuna studies driven from the driver with batched ask/tell; every trial is a run in the store.

The driver owns the study. Per batch it asks `parallel` trials, turns each into a cell (fixed +
sampled params, a normal run_id), runs the cells not yet in the store on the executor, writes their
records, then tells the results in trial-number order, so a seeded study is reproducible whatever
order runs finish in. Workers never touch the Optuna storage; intermediate values reach the pruner
through `runner.execute.report_channel`.

Runs -> trial states: ok -> COMPLETE with the objective metrics (a NaN metric -> FAIL unless the
objective has a nan_value); diverged -> PRUNED (the objective is undefined; spec 002 G2);
pruned -> PRUNED; failed, timeout, or params the task rejects -> FAIL. A trial whose run is already
in the store (ok/diverged, and failed/timeout unless retry_failed) is told from the stored row
without running again; several trials of one batch with the same params share one run.

Resume: RUNNING trials found at start were left by a driver that died; they are told FAIL and their
params enqueued, so they are asked again (and told from the store if their run had finished). A
worker lost while the driver lives is handled by the executor, which runs the lost runs again.
One driver per study at a time.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import ValidationError

from runner.api import execute_cells, make_executor, member_row, plan
from runner.execute.base import Executor, ReportChannel, ReportSpec
from runner.execute.progress import Progress
from runner.grid.spec import Cell
from runner.store import ResultStore, RunRecord
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
from runner.tune.spec import StudyPlan
from runner.tune.trials import TuneReport, missing_rows, trial_row, verdict
from tasks.status import FAILED, is_settled

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
    ) -> None:
        self.p, self.store, self.retry_failed = p, store, retry_failed
        storage_obj, self.label = open_storage(storage, store)
        self.study = open_study(p, storage_obj)
        self.report = TuneReport(p.name, self.label, p.n_trials, recovered=recover(self.study))
        self.rows: list[dict[str, Any]] = []
        self.new_members: list[dict[str, Any]] = []
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

    def flush(self) -> None:
        write_trials(self.store, self.rows)
        if self.new_members:
            self.store.write_part(pa.Table.from_pylist(self.new_members, schema=MEMBER_SCHEMA), "members")
        self.rows.clear()
        self.new_members.clear()

    def run_baselines(self, progress: bool) -> None:
        for c in self.p.baselines:
            self.member(c)
        todo, _, _ = plan(self.p.baselines, self.store, self.retry_failed)
        if todo:
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
            trial.set_user_attr("run_id", cell.run_id)
            asked.append((trial, cell))
        return asked, rejected

    def evaluate(self, cells: dict[str, Cell], owners: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Run cells (unique run ids) with the pruning channel open; persist before anyone is told."""
        self.hub.begin(owners)
        records: list[RunRecord] = []
        with self.channel.batch() if self.channel is not None else nullcontext():
            # finished runs are persisted as they come (even when interrupted), before anyone is told
            execute_cells(
                list(cells.values()),
                self.store,
                self.executor,
                self.p.name,
                progress=False,
                channel=self.channel,
                sink=records.extend,
            )
        self.report.ran += len(records)
        return {r.run_id: r.row for r in records}

    def loop(self, progress: bool, flush_s: float) -> None:
        TrialState = trial_states()  # noqa: N806 - the enum, under its usual name

        p, study = self.p, self.study
        known = self.known_runs()
        already = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in study.get_trials(deepcopy=False))
        bar = Progress(max(p.n_trials - already, 0), p.name, enabled=progress)
        failed, last_flush = 0, time.monotonic()
        try:
            while True:
                trials = study.get_trials(deepcopy=False)
                done = sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in trials)
                if done >= p.n_trials:
                    break
                waiting = any(t.state == TrialState.WAITING for t in trials)
                if p.sampler.name == "grid" and not waiting and study.sampler.is_exhausted(study):
                    self.report.stopped_early = "the grid is covered"
                    break
                if failed >= p.max_failed:
                    self.report.stopped_early = f"{failed} trials failed (max_failed)"
                    break
                n = min(p.parallel, p.n_trials - done)
                if p.sampler.name == "grid":  # never ask past the unvisited points (Grid would repeat some)
                    visited = {json.dumps(t.params, sort_keys=True) for t in trials if t.state.is_finished()}
                    n = min(n, max(1, grid_size(p) - len(visited) + sum(t.state == TrialState.WAITING for t in trials)))
                asked, rejected = self.ask(n)
                failed += rejected
                todo = {c.run_id: c for _, c in asked if c.run_id not in known}
                owners = {c.run_id: t for t, c in reversed(asked) if c.run_id in todo}  # first trial per run
                fresh = self.evaluate(todo, owners) if todo else {}
                known.update({rid: row for rid, row in fresh.items() if is_settled(row["status"], self.retry_failed)})
                for trial, cell in asked:  # trial-number order
                    row = fresh.get(cell.run_id) or known[cell.run_id]
                    self.report.from_store += cell.run_id not in fresh
                    state, values, note = verdict(p, row)
                    trial.set_user_attr("run_status", row["status"])
                    if note:
                        trial.set_user_attr("note", note)
                    tell(study, trial, values, state=state)
                    failed += state == TrialState.FAIL
                    self.member(cell)
                numbers = {t.number for t, _ in asked}
                told = [t for t in study.get_trials(deepcopy=False) if t.number in numbers]
                self.rows.extend(trial_row(p.name, self.label, p.task, t) for t in told)
                bar.update([t.user_attrs.get("run_status", FAILED) for t in told] + [FAILED] * rejected)
                if time.monotonic() - last_flush >= flush_s:
                    self.flush()
                    last_flush = time.monotonic()
        except KeyboardInterrupt:
            self.report.recovered += recover(study)  # leave nothing RUNNING
            raise
        finally:
            bar.close()

    def close(self) -> None:
        """Write what is buffered (plus any finished trial trials/ lacks), release Ray resources."""
        written = {r["number"] for r in self.rows}
        rest = [t for t in self.study.get_trials(deepcopy=False) if t.number not in written]
        self.rows.extend(missing_rows(self.store, self.p.name, self.label, self.p.task, rest))
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
                if t.user_attrs.get("run_id") in seen or len(seen) >= 20:
                    continue  # one line per distinct run (a Pareto front repeats integer points)
                seen.add(t.user_attrs.get("run_id", ""))
                run = runs.get(t.user_attrs.get("run_id", ""), {})
                self.report.best.append(
                    {
                        "number": t.number,
                        "values": t.values,
                        "params": t.params,
                        "run_id": t.user_attrs.get("run_id"),
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
    **executor_options: Any,
) -> TuneReport:
    """Run one study until n_trials of its trials are finished (COMPLETE + PRUNED)."""
    quiet()
    t0 = time.monotonic()
    store = ResultStore(results)
    options = {k: v for k, v in executor_options.items() if v is not None}
    driver = StudyDriver(p, store, storage, executor, options, retry_failed)
    write_trials(store, missing_rows(store, p.name, driver.label, p.task, driver.study.get_trials(deepcopy=False)))
    try:
        driver.run_baselines(progress)
        driver.loop(progress, flush_s)
    finally:
        driver.close()
    driver.summarise()
    driver.report.wall_s = time.monotonic() - t0
    return driver.report


def with_overrides(p: StudyPlan, n_trials: int | None = None, parallel: int | None = None) -> StudyPlan:
    """A plan with the command line's --n-trials / --parallel (a grid study never exceeds its grid)."""
    if n_trials is not None:
        n_trials = min(n_trials, grid_size(p)) if p.sampler.name == "grid" else n_trials
        p = replace(p, n_trials=n_trials, max_failed=max(p.max_failed, n_trials))
    return replace(p, parallel=parallel) if parallel is not None else p


def tune(
    source: str | Path | dict[str, Any] | list[StudyPlan],
    results: str | Path = "results",
    executor: str | Executor = "ray",
    *,
    n_trials: int | None = None,
    parallel: int | None = None,
    **kwargs: Any,
) -> list[TuneReport]:
    """Run every study of a study file (one per `sweep` combination), sharing one executor."""
    plans = source if isinstance(source, list) else load_plans(source)
    plans = [with_overrides(p, n_trials, parallel) for p in plans]
    shared = None
    if executor == "ray" and len(plans) > 1:
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in EXECUTOR_OPTIONS}
        executor = shared = make_executor("ray", **options)
    try:
        return [run_study(p, results, executor, **kwargs) for p in plans]
    finally:
        if shared is not None:
            shared.close()
