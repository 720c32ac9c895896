"""`convgrid run`: plan a grid against the store, link its cells to it, run what is left (shared with
the other drivers of the same grid on the same root), and merge small parts when a folder has too many.

    from runner.run import run_grid
    report = run_grid("grids/deep_linear/demo_depth.yaml", results="results")
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.coord.claims import Claims
from runner.errors import ConfigError, redact
from runner.execute.auto import make_executor
from runner.execute.base import Executor, ForecastsWork
from runner.execute.checkpointing import preempted
from runner.execute.options import ExecutionOptions, ExecutorKind, as_options
from runner.execute.progress import Resumes
from runner.fs.exclusive import for_root
from runner.grid.cells import CellSource, Grid, GridFile
from runner.grid.key import grid_key_of
from runner.grid.spec import load_grid
from runner.run.members import write_grid_members
from runner.run.persist import execute_cells, execute_shared
from runner.run.plan import expected_seconds, only_indices, plan_grid
from runner.settings import settings
from runner.store import ResultStore


@dataclass
class RunReport:
    grid: str
    results: str
    cells: int
    already_done: int
    skipped_failed: int
    executed: int
    counts: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    compacted: str | None = None  # what the automatic compaction after the run did, if it ran
    executor: str | None = None  # the executor that ran the cells (auto picks one)
    by_others: int = 0  # cells of this plan that other drivers on the same store ran meanwhile
    resumes: Resumes = field(default_factory=Resumes)  # runs resumed from checkpoints, steps they saved

    def line(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "nothing"
        others = f"; {self.by_others} cells ran in other drivers" if self.by_others else ""
        if self.executed == 0 and not self.resumes.preempted:
            head = f"{self.grid}: all {self.already_done} of {self.cells} cells already done; nothing to run"
            if self.skipped_failed:
                head = (
                    f"{self.grid}: {self.already_done} of {self.cells} cells done, {self.skipped_failed} "
                    "failed/timed out (use --retry-failed); nothing to run"
                )
            if self.by_others:
                head = f"{self.grid}: nothing ran here{others}"
            return f"{head} (results in {redact(self.results)})"
        if self.resumes.text():
            counts += f"; {self.resumes.text()}"
        return (
            f"{self.grid}: ran {self.executed} of {self.cells} cells in {self.wall_s:.1f}s ({counts}); "
            f"{self.already_done} were already done, {self.skipped_failed} failed ones skipped{others}; "
            f"results in {redact(self.results)}" + (f"; {self.compacted}" if self.compacted else "")
        )


def claims_for(store: ResultStore, grid: CellSource, lease_s: float | None) -> Claims | None:
    """This driver's share of the claims on `grid` (runner.coord.claims), or None where the root has no
    create-if-absent (then drivers do not share work)."""
    exclusive = for_root(store.root, store.fs)
    if exclusive is None:
        return None
    lease = lease_s if lease_s is not None else settings().lease_s
    return Claims(store.files, exclusive, grid_key_of(grid.id_chunks()), lease)


def run_grid(
    source: str | Path | Mapping[str, Any] | Grid | GridFile,
    results: str | Path = "results",
    options: ExecutionOptions | ExecutorKind | None = None,
    *,
    executor: Executor | None = None,
    retry_failed: bool = False,
    only: Iterable[str] | None = None,
    share: bool = True,
    lease_s: float | None = None,
) -> RunReport:
    """Run every cell of a grid not yet in the store, as `options` say (an executor kind alone is
    `ExecutionOptions(executor=kind)`), or on `executor`, which the caller made and closes. `only`
    restricts to (and re-runs) given run ids. With `share`, drivers running the same grid on the same
    root split the work (runner.coord.claims; a driver is presumed dead `lease_s` after its last
    heartbeat); `only` never shares: it reruns."""
    options = as_options(options)
    grid: CellSource = source if isinstance(source, Grid | GridFile) else load_grid(source)
    if options.checkpoint_every_s is None and isinstance(grid, GridFile) and grid.checkpoint_every is not None:
        options = options.with_(checkpoint_every_s=grid.checkpoint_every)  # the file's, where the command sets none
    store = ResultStore(results)
    store.recover()  # finish or undo what a killed command left before planning from the store
    if only is not None:
        todo = only_indices(grid, only)
        if not len(todo):
            raise ConfigError("no cell of this grid has that run id", file=grid.source, key="--only")
        done, skipped = 0, 0
    else:
        planned = plan_grid(grid, store, retry_failed)
        todo, done, skipped = planned.todo, planned.done, planned.skipped
    cells = len(todo) if only is not None else len(grid)
    report = RunReport(grid.name, store.root, cells, done, skipped, len(todo))
    runner = None
    if len(todo):
        runner = executor or make_executor(
            options, lambda within: expected_seconds(grid, todo, store, within), label=grid.name
        )
        if executor is None and isinstance(runner, ForecastsWork):
            # the embedded Ray only once the cells timed here say it pays, as for a study: on 2 cores a
            # grid of 1,000 runs of 25 ms took 0.65 of the sequential loop with Ray started at once, 0.50
            # in process (docs/architecture.md, "Concurrency mechanisms, each measured alone")
            runner.expect_total(len(todo))
        else:
            # Workers first: a cluster that cannot be reached fails the command before anything is written
            runner.start()
    write_grid_members(store, grid)
    if runner is None:
        return report
    report.executor = runner.name
    t0 = time.monotonic()
    claims = claims_for(store, grid, lease_s) if share and only is None else None
    try:
        if claims is None:
            report.counts = execute_cells(
                grid.cells_at(todo), store, runner, grid.name, options, total=len(todo), resumes=report.resumes
            )
        else:
            report.counts = execute_shared(
                grid, todo, store, runner, claims, retry_failed, grid.name, options, report.resumes
            )
            report.executed = sum(report.counts.values())
            if not preempted():  # else what is left was preempted here, not run elsewhere
                report.by_others = max(0, len(todo) - report.executed - report.resumes.preempted)
    finally:
        report.wall_s = time.monotonic() - t0
        if executor is None:
            runner.close()
    report.compacted = compact_when_fragmented(store)
    return report


def compact_when_fragmented(store: ResultStore, max_parts: int | None = None) -> str | None:
    """Merge the small parts of every folder (a task's runs, curves, attempts, attempt_curves; members,
    trials) holding more than `max_parts` part files (default CONVGRID_COMPACT_PARTS, 64; 0 never):
    reads slow down with the number of parts, and each flush adds some. A bounded merge
    (runner.store.merge): one group of parts at a time, streamed, each group one transaction under the
    writer lock, so it is safe beside other drivers and the driver's memory does not grow with the
    store (`convgrid compact` rewrites whole tasks). Returns its report line, or None."""
    limit = max_parts if max_parts is not None else settings().compact_parts
    if limit <= 0:
        return None
    from runner.store.merge import merge_parts

    report = merge_parts(store, limit)
    return report.line() if report.parts_in or report.damaged else None
