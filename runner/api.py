"""The Python API (what the CLI calls): run a grid, resume it, rerun one run, ask for status.

    from runner import run_grid
    report = run_grid("grids/deep_linear/demo_depth.yaml", results="results")

Semantics are the CLI's: work already in the store (ok or diverged) is skipped, failed and timed-out
runs only run again with retry_failed, pruned runs always run again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.errors import ConfigError, redact
from runner.execute.base import Executor, ReportChannel, WorkItem
from runner.execute.progress import Progress
from runner.execute.unwritable import write_isolated
from runner.grid.schema import task_schemas
from runner.grid.spec import Cell, Grid, load_grid
from runner.store import ResultStore, RunRecord
from tasks.status import FINAL_STATUSES, is_settled


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

    def line(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "nothing"
        if self.executed == 0:
            head = f"{self.grid}: all {self.already_done} of {self.cells} cells already done; nothing to run"
            if self.skipped_failed:
                head = (
                    f"{self.grid}: {self.already_done} of {self.cells} cells done, {self.skipped_failed} "
                    "failed/timed out (use --retry-failed); nothing to run"
                )
            return f"{head} (results in {redact(self.results)})"
        return (
            f"{self.grid}: ran {self.executed} of {self.cells} cells in {self.wall_s:.1f}s ({counts}); "
            f"{self.already_done} were already done, {self.skipped_failed} failed ones skipped; "
            f"results in {redact(self.results)}"
        )


def make_executor(kind: str | Executor = "ray", **options: Any) -> Executor:
    if not isinstance(kind, str):
        return kind
    if kind == "local":
        from runner.execute.local import LocalExecutor

        return LocalExecutor(threads=options.get("threads") or 1, timeout_s=options.get("timeout_s"))
    if kind == "ray":
        from runner.execute.ray_pool import RayExecutor

        return RayExecutor(**{k: v for k, v in options.items() if v is not None})
    raise ConfigError(f"unknown executor {kind!r}", key="--executor", choices=["local", "ray"])


def plan(cells: Sequence[Cell], store: ResultStore, retry_failed: bool = False) -> tuple[list[Cell], int, int]:
    """(cells to run, how many are already done, how many failed ones are skipped)."""
    latest: dict[str, str] = {}
    for task in {c.task for c in cells}:
        table = store.read_runs(task, columns=["status"])
        latest.update(zip(table["run_id"].to_pylist(), table["status"].to_pylist(), strict=True))
    todo, done, skipped = [], 0, 0
    for cell in cells:
        status = latest.get(cell.run_id)
        if not is_settled(status, retry_failed):
            todo.append(cell)
        elif status in FINAL_STATUSES:
            done += 1
        else:
            skipped += 1
    return todo, done, skipped


def member_row(cell: Cell, grid: str, kind: str, source: str | None) -> dict[str, Any]:
    """The members/ row saying that grid or study `grid` asked for `cell`'s run."""
    return {"run_id": cell.run_id, "task": cell.task, "grid": grid, "kind": kind, "source": source, "block": cell.block}


def member_rows(grid: Grid, kind: str = "grid") -> list[dict[str, Any]]:
    return [member_row(c, grid.name, kind, grid.source) for c in grid.cells]


def execute_cells(
    cells: Sequence[Cell],
    store: ResultStore,
    executor: Executor,
    label: str,
    progress: bool = True,
    flush_every: int = 256,
    flush_s: float = 2.0,
    channel: ReportChannel | None = None,
    sink: Callable[[list[RunRecord]], None] | None = None,
) -> Counter[str]:
    """Run cells, persisting records as chunks complete: a part file once `flush_every` runs have
    arrived or `flush_s` seconds have passed since the last one (so a crash loses at most that much
    finished work, and tiny runs do not make one file each). A Ctrl-C keeps what finished.
    `channel` (from `executor.report_channel`) carries intermediate values to a judge; `sink` sees
    every finished record too (the tuner tells its trials from them)."""
    items = [WorkItem(c.run_id, c.task, c.params_json()) for c in cells]
    bar = Progress(len(items), label, enabled=progress)
    buffer: list[RunRecord] = []
    last_flush = time.monotonic()

    def flush() -> None:
        nonlocal last_flush
        if buffer:
            for failed in write_isolated(store, buffer, task_schemas):
                was = next(r.status for r in buffer if r.run_id == failed.run_id)
                bar.counts[was] -= 1  # counted as it arrived; stored as failed (the store refused it)
                bar.counts[failed.status] += 1
            buffer.clear()
        last_flush = time.monotonic()

    try:
        for records in executor.execute(items, channel):
            buffer.extend(records)
            if sink is not None:
                sink(records)
            bar.update([r.status for r in records])
            if len(buffer) >= flush_every or time.monotonic() - last_flush >= flush_s:
                flush()
    finally:
        flush()
        bar.close()
    return bar.counts


def run_grid(
    source: str | Path | Mapping[str, Any] | Grid,
    results: str | Path = "results",
    executor: str | Executor = "ray",
    *,
    retry_failed: bool = False,
    only: Iterable[str] | None = None,
    progress: bool = True,
    close_executor: bool = True,
    flush_every: int = 256,
    flush_s: float = 2.0,
    **executor_options: Any,
) -> RunReport:
    """Run every cell of a grid not yet in the store. `only` restricts to (and re-runs) given run ids."""
    grid = source if isinstance(source, Grid) else load_grid(source)
    store = ResultStore(results)
    store.recover()  # finish or undo what a killed command left before planning from the store
    cells = grid.cells
    if only is not None:
        wanted = set(only)
        cells = [c for c in cells if c.run_id in wanted or any(c.run_id.startswith(w) for w in wanted)]
        if not cells:
            raise ConfigError("no cell of this grid has that run id", file=grid.source, key="--only")
        todo, done, skipped = cells, 0, 0
    else:
        todo, done, skipped = plan(cells, store, retry_failed)
    report = RunReport(grid.name, store.root, len(cells), done, skipped, len(todo))
    runner = make_executor(executor, **executor_options) if todo else None
    if runner is not None:
        # Workers first: a cluster that cannot be reached fails the command before anything is written.
        runner.start()
    store.write_members(member_rows(grid))
    if runner is None:
        return report
    t0 = time.monotonic()
    try:
        report.counts = execute_cells(
            todo, store, runner, grid.name, progress=progress, flush_every=flush_every, flush_s=flush_s
        )
    finally:
        report.wall_s = time.monotonic() - t0
        if close_executor:
            runner.close()
    return report


def cells_from_store(store: ResultStore, ids: Iterable[str]) -> list[Cell]:
    """Rebuild cells of stored runs (full id or a unique prefix) from their recorded params."""
    import json

    from runner.grid.identity import run_id, validate_params
    from tasks import get_spec

    cells = []
    for wanted in ids:
        found = []
        for task_name in store.tasks():
            table = store.read_runs(task_name, columns=["params_json"])
            for rid, params in zip(table["run_id"].to_pylist(), table["params_json"].to_pylist(), strict=True):
                if rid.startswith(wanted):
                    found.append((task_name, rid, params))
        if len(found) != 1:
            problem = "no stored run has" if not found else f"{len(found)} stored runs match"
            raise ConfigError(f"{problem} run id {wanted!r}", file=store.root, key="--only")
        task_name, rid, params = found[0]
        task = get_spec(task_name)
        model = validate_params(task, json.loads(params))
        if run_id(task, model) != rid:
            raise ConfigError(
                f"run {rid} was made by another version of task {task_name}; rerun it from its grid", key="--only"
            )
        cells.append(Cell(rid, task_name, model, 0))
    return cells
