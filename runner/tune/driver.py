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
is handled by the executor, which runs the lost runs again. One driver per study at a time: each holds
the study's lease (runner.coord.study_lease), and a second one stops before it changes anything.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from runner.execute.auto import make_executor
from runner.execute.base import Executor, ForecastsWork, ReportChannel, ReportSpec
from runner.execute.options import ExecutionOptions, ExecutorKind, as_options
from runner.execute.progress import Progress
from runner.grid.cells import Cell
from runner.grid.identity import canonical_params
from runner.run.members import member_row
from runner.run.persist import execute_cells
from runner.run.plan import plan
from runner.store import ResultStore, RunRecord
from runner.store.columns import MEMBER_SCHEMA
from runner.store.layout import MEMBERS
from runner.store.trials import write_trials
from runner.tune.one_driver import study_lease
from runner.tune.optuna_adapter import (
    JOURNAL_NAME,
    State,
    Study,
    StudyStorage,
    TrialInfo,
    load_plans,
    open_storage,
    quiet,
)
from runner.tune.pruning import PruningHub
from runner.tune.schedule import TrialSchedule
from runner.tune.spec import StudyPlan, with_overrides
from runner.tune.trials import TuneReport, fail_reason, missing_rows, run_status, trial_row, trial_run_id
from tasks.registry import get_spec
from tasks.status import FAILED, PRUNED, RETRY_ON_REQUEST, is_settled

__all__ = ["JOURNAL_NAME", "TuneReport", "run_study", "study_lease", "tune", "with_overrides"]


class StudyDriver:
    """One study's run: its storage and study, the rows it owes trials/ and members/, and the hooks its
    schedule calls (runner.tune.schedule.ScheduleHost)."""

    def __init__(
        self,
        p: StudyPlan,
        store: ResultStore,
        opened: StudyStorage,
        executor: Executor,
        options: ExecutionOptions,
        retry_failed: bool,
    ) -> None:
        self.p, self.store, self.retry_failed, self.options = p, store, retry_failed, options
        self.label = opened.label
        self.study = Study.open(p, opened)
        self.report = TuneReport(p.name, self.label, p.n_trials, recovered=self.study.recover())
        self.rows: list[dict[str, Any]] = []  # trials/ rows not written yet; appended by the teller thread too
        self.rows_lock = threading.Lock()
        self.new_members: list[dict[str, Any]] = []
        # what the summary shows of a run; kept for each run this driver ran or was told, so that the summary
        # reads back from the store only the runs it has not seen (not every run of the task)
        self.metrics = list(dict.fromkeys([o.metric for o in p.objectives] + p.report + ["flops"]))
        self.seen: dict[str, dict[str, Any]] = {}
        self.last_flush = time.monotonic()
        self.bar = Progress(0, p.name, enabled=False)
        old = store.read_members()
        self.members = {
            r for g, r in zip(old["grid"].to_pylist(), old["run_id"].to_pylist(), strict=True) if g == p.name
        }
        self.guard: Callable[[], None] = lambda: None  # raises where this driver lost the study's lease
        self.hub = PruningHub(self.study)
        self.executor = executor
        self.channel: ReportChannel | None = None
        if p.pruning:
            spec = ReportSpec(str(p.pruner.metric), p.reported_log, p.pruner.every)
            self.channel = self.executor.report_channel(self.hub.judge, spec)

    # ---- what the schedule tells the driver (ScheduleHost) -------------------------------------------
    def rejected(self, count: int) -> None:
        self.bar.update([FAILED] * count)

    def decided(self, cell: Cell, row: dict[str, Any], fresh: bool) -> None:
        if all(m in row for m in self.metrics):  # a stored row told from known_runs lacks some
            self.seen[cell.run_id] = {k: row[k] for k in ("status", *self.metrics)}
        self.report.from_store += not fresh
        self.report.skipped_failed += not fresh and row["status"] in RETRY_ON_REQUEST
        self.member(cell)
        self.bar.update([row["status"]])

    def told(self, trial: TrialInfo, run_id: str) -> None:
        with self.rows_lock:
            self.rows.append(trial_row(self.p, self.label, trial, run_id))

    def ran(self, record: RunRecord) -> None:
        self.report.counts[record.row["status"]] += 1

    # ---- trials/ and members/ ----------------------------------------------------------------------
    def member(self, cell: Cell) -> None:
        if cell.run_id not in self.members:
            self.members.add(cell.run_id)
            self.new_members.append(
                {**member_row(cell, self.p.name, "study", self.p.source), "added": datetime.now(UTC)}
            )

    def flush(self) -> None:
        with self.rows_lock:
            rows, self.rows = self.rows, []
        write_trials(self.store, rows)
        if self.new_members:
            self.store.write_part(pa.Table.from_pylist(self.new_members, schema=MEMBER_SCHEMA), MEMBERS)
        self.new_members.clear()
        self.last_flush = time.monotonic()

    def flush_if_due(self) -> None:
        """trials/ and members/ rows every flush window (runs have execute_cells' own policy)."""
        if time.monotonic() - self.last_flush >= self.options.flush.seconds:
            self.flush()

    # ---- running -----------------------------------------------------------------------------------
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

    def known_runs(self) -> dict[str, dict[str, Any]]:
        """Settled runs of the task: run_id -> its row (what a trial asking for it is told)."""
        metrics = list(dict.fromkeys([o.metric for o in self.p.objectives] + self.p.report))
        rows = self.store.read_runs(self.p.task, columns=["status", *metrics]).to_pylist()
        return {r["run_id"]: r for r in rows if is_settled(r["status"], self.retry_failed)}

    def run_baselines(self) -> None:
        for c in self.p.baselines:
            self.member(c)
        todo, _, _ = plan(self.p.baselines, self.store, self.retry_failed)
        if todo:
            # the baselines, then the trials: an upper bound of what is left is good enough to decide on
            with self.expecting(lambda: len(todo) + self.p.n_trials):
                label = f"{self.p.name} baselines"
                self.report.counts += execute_cells(todo, self.store, self.executor, label, self.options)

    def repair_runs(self) -> None:
        """Run again the cells of finished trials whose run is not in the store: a driver killed after
        telling a trial but before its flush. Pruned trials are left alone (a pruned run is not done
        either way; it runs again when asked)."""
        stored = set(self.store.read_runs(self.p.task, columns=["status"])["run_id"].to_pylist())
        lost: dict[str, Cell] = {}
        for t in self.study.trials():
            if t.state.finished and run_status(t) not in (None, PRUNED):  # None: never ran (rejected, recovered)
                cell = self.p.cell(dict(t.params))
                if cell.run_id not in stored:
                    lost[cell.run_id] = cell
        if lost:
            label = f"{self.p.name} (runs of told trials)"
            self.report.counts += execute_cells(list(lost.values()), self.store, self.executor, label, self.options)
            self.report.repaired = len(lost)

    def loop(self) -> None:
        p = self.p
        schedule = TrialSchedule(p, self.study, self.known_runs(), self.hub, self, self.retry_failed)
        self.bar = Progress(max(p.n_trials - schedule.done, 0), p.name, enabled=self.options.progress)
        quiet_options = self.options.with_(progress=False)  # the study's own bar counts trials, not runs

        def finished(records: list[RunRecord]) -> None:
            self.guard()  # still this study's driver (not paused and taken over) before telling anything
            schedule.finished(records)
            self.flush_if_due()

        try:
            with self.expecting(schedule.left), self.channel.batch() if self.channel is not None else nullcontext():
                execute_cells(
                    schedule.cells(),
                    self.store,
                    self.executor,
                    p.name,
                    quiet_options,
                    channel=self.channel,
                    sink=finished,
                    doorbell=schedule.doorbell,
                )
        except KeyboardInterrupt:
            schedule.close()  # the tells already decided land first
            self.report.recovered += self.study.recover()  # leave nothing RUNNING
            raise
        finally:
            schedule.close()
            self.bar.close()
            self.report.stopped_early, self.report.gave_up = schedule.stopped_early, schedule.gave_up

    def close(self) -> None:
        """Write what is buffered (plus any finished trial trials/ lacks); release the channel."""
        written = {r["number"] for r in self.rows}
        rest = [t for t in self.study.trials() if t.number not in written]
        self.rows.extend(missing_rows(self.store, self.p, self.label, rest))
        self.flush()
        if self.channel is not None:
            self.channel.close()

    def summarise(self) -> None:
        p, trials, metrics = self.p, self.study.trials(), self.metrics
        self.report.states = Counter(t.state.value for t in trials if t.state != State.WAITING)
        self.report.fail_reasons = Counter(fail_reason(t) for t in trials if t.state == State.FAIL)
        best: dict[str, TrialInfo] = {}  # one line per distinct run (a Pareto front repeats integer points)
        for t in sorted(self.study.best(), key=lambda t: t.number):
            best.setdefault(trial_run_id(p, t) or "", t)
            if len(best) == 20:
                break
        runs = self.runs([*best, *(c.run_id for c in p.baselines)])
        for rid, t in best.items():
            run = runs.get(rid, {})
            self.report.best.append(
                {
                    "number": t.number,
                    "values": t.values,
                    "params": t.params,
                    "run_id": rid or None,
                    "metrics": {m: run.get(m) for m in metrics},
                }
            )
        for c in p.baselines:
            run = runs.get(c.run_id, {})
            self.report.baselines.append(
                {
                    "run_id": c.run_id,
                    "status": run.get("status", "missing"),
                    "params": baseline_params(p, c),
                    "metrics": {m: run.get(m) for m in metrics},
                }
            )

    def runs(self, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The summary's columns of these runs: those this driver saw, the rest read from the store."""
        rows = {rid: self.seen[rid] for rid in run_ids if rid in self.seen}
        rest = sorted({rid for rid in run_ids if rid and rid not in rows})
        if rest:
            stored = self.store.read_runs(self.p.task, ["status", *self.metrics], pc.field("run_id").isin(rest))
            rows.update({r["run_id"]: r for r in stored.to_pylist()})
        return rows


def run_study(
    p: StudyPlan,
    results: str | Path,
    executor: Executor,
    options: ExecutionOptions,
    *,
    storage: str | None = None,
    retry_failed: bool = False,
) -> TuneReport:
    """Run one study on `executor` until n_trials of its trials are finished (COMPLETE + PRUNED), holding
    its lease throughout: one driver per study."""
    quiet()
    t0 = time.monotonic()
    store = ResultStore(results)
    opened = open_storage(storage, store)  # a storage that cannot be opened is refused before the lease is taken
    with study_lease(store, p.name, storage) as lease:
        driver = StudyDriver(p, store, opened, executor, options, retry_failed)
        if lease is not None:
            driver.guard = lease.check
        write_trials(store, missing_rows(store, p, driver.label, driver.study.trials()))
        try:
            driver.repair_runs()
            driver.run_baselines()
            driver.loop()
        finally:
            driver.close()
        driver.summarise()
    driver.report.wall_s = time.monotonic() - t0
    return driver.report


def tune(
    source: str | Path | dict[str, Any] | list[StudyPlan],
    results: str | Path = "results",
    options: ExecutionOptions | ExecutorKind | None = None,
    *,
    executor: Executor | None = None,
    storage: str | None = None,
    retry_failed: bool = False,
    n_trials: int | None = None,
    parallel: int | None = None,
    deterministic: bool = False,
) -> list[TuneReport]:
    """Run every study of a study file (one per `sweep` combination) on one executor: `executor`, which
    the caller made and closes, or the one `options` ask for."""
    options = as_options(options)
    plans = source if isinstance(source, list) else load_plans(source)
    plans = [with_overrides(p, n_trials, parallel, deterministic) for p in plans]
    label = plans[0].name if len(plans) == 1 else ", ".join(dict.fromkeys(p.name.split("[")[0] for p in plans))
    runner = executor or make_executor(options, label=label)  # a sweep's studies share their file's name
    try:
        return [run_study(p, results, runner, options, storage=storage, retry_failed=retry_failed) for p in plans]
    finally:
        if executor is None:
            runner.close()


def baseline_params(plan: StudyPlan, cell: Cell) -> dict[str, Any]:
    """What sets a baseline apart from the study's trials: its params that are not the task's defaults
    and not the study's fixed `params:` (BCGD with the line-search step, say)."""
    own = canonical_params(get_spec(plan.task), cell.params)
    return {k: v for k, v in own.items() if plan.fixed.get(k, object()) != v}
