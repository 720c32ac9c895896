"""The Python API (what the CLI calls): run a grid, resume it, rerun one run, ask for status.

    from runner import run_grid
    report = run_grid("grids/deep_linear/demo_depth.yaml", results="results")

Semantics are the CLI's: work already in the store (ok or diverged) is skipped, failed and timed-out
runs only run again with retry_failed, pruned runs always run again.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.errors import ConfigError, redact
from runner.execute.base import Executor, ReportChannel, WorkItem
from runner.execute.progress import Progress
from runner.execute.unwritable import write_isolated
from runner.execute.waves import WaveSource
from runner.grid import cells as grid_cells
from runner.grid.cells import Cell, CellSource, Grid, GridFile
from runner.grid.schema import task_schemas
from runner.grid.spec import load_grid
from runner.store import ResultStore, RunRecord
from runner.store.claims import Claims, grid_key_of
from runner.store.columns import MEMBER_SCHEMA
from runner.store.group_commit import GroupCommit
from runner.store.index import CELL_ROW, lookup, member_spill, run_keys, settled_cells
from runner.store.spill import KeySpill, matched


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

    def line(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items())) or "nothing"
        others = f"; {self.by_others} cells ran in other drivers" if self.by_others else ""
        if self.executed == 0:
            head = f"{self.grid}: all {self.already_done} of {self.cells} cells already done; nothing to run"
            if self.skipped_failed:
                head = (
                    f"{self.grid}: {self.already_done} of {self.cells} cells done, {self.skipped_failed} "
                    "failed/timed out (use --retry-failed); nothing to run"
                )
            if self.by_others:
                head = f"{self.grid}: nothing ran here{others}"
            return f"{head} (results in {redact(self.results)})"
        return (
            f"{self.grid}: ran {self.executed} of {self.cells} cells in {self.wall_s:.1f}s ({counts}); "
            f"{self.already_done} were already done, {self.skipped_failed} failed ones skipped{others}; "
            f"results in {redact(self.results)}" + (f"; {self.compacted}" if self.compacted else "")
        )


def make_executor(kind: str | Executor = "ray", **options: Any) -> Executor:
    """An executor by name: local, ray, or auto (run_grid first picks local for small work). auto on the
    embedded Ray, without --timeout or GPU actors, runs cells in process while Ray starts
    (runner.execute.warm); with them, or joining a cluster, it is ray."""
    if not isinstance(kind, str):
        return kind
    if kind == "local":
        from runner.execute.local import LocalExecutor

        return LocalExecutor(
            threads=options.get("threads") or 1, timeout_s=options.get("timeout_s"), batch=options.get("batch", True)
        )
    if kind in ("ray", "auto"):
        from runner.execute.ray_pool import RayExecutor

        pool = RayExecutor(**{k: v for k, v in options.items() if v is not None})
        if kind == "auto" and not (pool.address or pool.timeout_s or pool.gpus_per_worker):
            from runner.execute.warm import WarmStartExecutor

            return WarmStartExecutor(pool)
        return pool
    raise ConfigError(f"unknown executor {kind!r}", key="--executor", choices=["auto", "local", "ray"])


SMALL_WORK_ENV = "CONVGRID_SMALL_WORK_S"
DEFAULT_SMALL_WORK_S = 3.0  # about what starting an embedded Ray and warming its workers costs here


def small_work(grid: CellSource, todo: np.ndarray, store: ResultStore, limit_s: float | None = None) -> bool:
    """Whether the cells left to run would take less than `limit_s` (default CONVGRID_SMALL_WORK_S
    or 3 s) in one process, judged from the median stored wall time of each task's runs: work that
    small finishes in process before an embedded Ray has started. A task with no stored runs is
    unknown work: not small."""
    limit = limit_s if limit_s is not None else float(os.environ.get(SMALL_WORK_ENV, DEFAULT_SMALL_WORK_S))
    if limit <= 0 or not len(todo):
        return False
    # A run costs at least about a millisecond of record and store work: more runs cannot be small.
    tasks, _ = grid.task_and_block(todo[: int(limit * 1000) + 1])
    if len(tasks) > limit * 1000:
        return False
    total = 0.0
    for task, count in Counter(tasks.tolist()).items():
        times = store.read_runs(task, columns=["wall_s"])["wall_s"].drop_null()
        if len(times) == 0:
            return False
        total += count * float(pc.approximate_median(times).as_py())
    return total < limit


def plan(cells: Sequence[Cell], store: ResultStore, retry_failed: bool = False) -> tuple[list[Cell], int, int]:
    """(cells to run, how many are already done, how many failed ones are skipped)."""
    planned = plan_grid(Grid("", "", "", list(cells)), store, retry_failed)
    return [cells[i] for i in planned.todo.tolist()], planned.done, planned.skipped


@dataclass(frozen=True)
class GridPlan:
    """What a grid leaves to run: indices into its distinct cells (`CellSource.ids`), and counts."""

    todo: np.ndarray
    done: int
    skipped: int


def cell_keys(grid: CellSource, indices: np.ndarray | None = None) -> KeySpill:
    """The cells' keys and indices (all of the grid's, or those at `indices`), in a KeySpill: ids read
    a chunk at a time, never the grid's at once."""
    spill = KeySpill(CELL_ROW)
    if indices is not None:
        for start in range(0, len(indices), grid_cells.ID_ROWS):
            at = indices[start : start + grid_cells.ID_ROWS]
            spill.add(run_keys(grid.ids_at(at)), index=at)
        return spill
    start = 0
    for ids in grid.id_chunks():
        spill.add(run_keys(ids), index=np.arange(start, start + len(ids), dtype=np.int64))
        start += len(ids)
    return spill


def plan_grid(
    grid: CellSource, store: ResultStore, retry_failed: bool = False, indices: np.ndarray | None = None
) -> GridPlan:
    """Plan from the store's runs: the grid's cells (or those at `indices`) matched with every stored
    run of its tasks on their keys, range by range (runner.store.index.settled_cells), no cell built:
    the driver's memory does not grow with the grid or the store."""
    todo = np.zeros(len(grid), dtype=bool)
    done = skipped = 0
    with cell_keys(grid, indices) as cells:
        for rows, final, skip in settled_cells(store, grid.tasks(), cells, retry_failed):
            todo[rows["index"][~(final | skip)]] = True
            done += int(final.sum())
            skipped += int(skip.sum())
    return GridPlan(np.flatnonzero(todo), done, skipped)


def only_indices(grid: CellSource, wanted: Iterable[str]) -> np.ndarray:
    """Indices of the grid's cells whose run id is, or starts with, one of `wanted`."""
    found, start = [np.empty(0, dtype=np.int64)], 0
    for ids in grid.id_chunks():
        mask = np.zeros(len(ids), dtype=bool)
        for prefix in wanted:
            mask |= np.char.startswith(ids, prefix.encode())
        found.append(np.flatnonzero(mask) + start)
        start += len(ids)
    return np.concatenate(found)


MEMBER_PART_ROWS = 262_144  # members rows per part file: a million-cell grid writes four, never holds all


def write_grid_members(store: ResultStore, grid: CellSource, kind: str = "grid") -> int:
    """Link every cell of `grid` to it in members/, the rows not already there (matched on keys range by
    range, as `plan_grid`), written in parts of MEMBER_PART_ROWS rows built column-wise from the run
    ids (no row dict per cell). Returns how many."""
    missing = np.zeros(len(grid), dtype=bool)
    with cell_keys(grid) as cells, member_spill(store, grid.name, cells.held_keys()) as have:
        for rows, members in matched(cells, have):
            _, found = lookup(np.sort(members["key"]), rows["key"])
            missing[rows["index"][~found]] = True
    new = np.flatnonzero(missing)
    del missing
    added = pa.scalar(datetime.now(UTC), pa.timestamp("us", tz="UTC"))
    for start in range(0, len(new), MEMBER_PART_ROWS):
        rows = new[start : start + MEMBER_PART_ROWS]
        tasks, blocks = grid.task_and_block(rows)
        n = len(rows)
        table = pa.table(
            {
                "run_id": pa.array(grid.ids_at(rows).astype(str), pa.string()),
                "task": pa.array(tasks, pa.string()),
                "grid": pa.repeat(pa.scalar(grid.name), n),
                "kind": pa.repeat(pa.scalar(kind), n),
                "source": pa.repeat(pa.scalar(grid.source, pa.string()), n),
                "block": pa.array(blocks, pa.int32()),
                "added": pa.repeat(added, n),
            },
            schema=MEMBER_SCHEMA,
        )
        store.write_part(table, "members")
    return len(new)


def member_row(cell: Cell, grid: str, kind: str, source: str | None) -> dict[str, Any]:
    """The members/ row saying that grid or study `grid` asked for `cell`'s run."""
    return {"run_id": cell.run_id, "task": cell.task, "grid": grid, "kind": kind, "source": source, "block": cell.block}


def member_rows(grid: Grid | GridFile, kind: str = "grid") -> list[dict[str, Any]]:
    return [member_row(c, grid.name, kind, grid.source) for c in grid.cells]


def work_item(cell: Cell) -> WorkItem:
    return WorkItem(cell.run_id, cell.task, cell.params_json())


def work_items(cells: Iterable[Cell | list[Cell] | None]) -> Iterator[WorkItem | list[WorkItem] | None]:
    """Cells as the executor's lazy source (a group stays a group; None, "nothing yet", passes through)."""
    for c in cells:
        yield None if c is None else [work_item(x) for x in c] if isinstance(c, list) else work_item(c)


def execute_cells(
    cells: Iterable[Cell | list[Cell] | None],
    store: ResultStore,
    executor: Executor,
    label: str,
    progress: bool = True,
    flush_every: int = 256,
    flush_s: float = 2.0,
    channel: ReportChannel | None = None,
    sink: Callable[[list[RunRecord]], None] | None = None,
    total: int | None = None,
    waves: WaveSource | None = None,
) -> Counter[str]:
    """Run cells, persisting records as chunks complete: a flush once `flush_every` runs have
    arrived or `flush_s` seconds have passed since the last one (so a crash loses at most that much
    finished work, plus the flush being committed, and tiny runs do not make one file each). Flushes
    are committed by a writer thread (runner.store.group_commit: the fsyncs of one overlap the next
    runs, and flushes waiting for it share one commit); all is committed when this returns. A Ctrl-C
    keeps what finished. `channel` (from `executor.report_channel`) carries intermediate values to a
    judge; `sink` sees every finished record too (the tuner tells its trials from them). `cells` is
    pulled lazily, as the executor's workers free up (see `Executor.execute`); `total` (default: its
    length, where it has one) sizes the progress bar. `waves`, where `cells` is one, is told of every
    record as it arrives and once committed, and may settle (flush and commit) before it waits."""
    if total is None:
        total = len(cells) if isinstance(cells, Sized) else 0
    bar = Progress(total, label, enabled=progress)
    buffer: list[RunRecord] = []
    last_flush = time.monotonic()

    def commit(records: Sequence[RunRecord]) -> list[tuple[str, RunRecord]]:
        """(status it arrived with, the failed record stored instead) of each record the store refused."""
        arrived = {r.run_id: r.status for r in records}
        refused = [(arrived[f.run_id], f) for f in write_isolated(store, records, task_schemas)]
        if waves is not None:
            waves.committed(records)
        return refused

    def recount(refused: list[tuple[str, RunRecord]]) -> None:
        for was, failed in refused:
            bar.counts[was] -= 1  # counted as it arrived; stored as failed (the store refused it)
            bar.counts[failed.status] += 1

    writer = GroupCommit(commit)

    def flush() -> None:
        nonlocal last_flush
        if buffer:
            writer.submit(list(buffer))
            buffer.clear()
        last_flush = time.monotonic()

    def settle() -> None:
        flush()
        recount(writer.drain())

    if waves is not None:
        waves.settle = settle
    try:
        for records in executor.execute(work_items(cells), channel):
            buffer.extend(records)
            if waves is not None:
                waves.arrived(records)
            if sink is not None:
                sink(records)
            bar.update([r.status for r in records])
            if len(buffer) >= flush_every or time.monotonic() - last_flush >= flush_s:
                flush()
    finally:
        flush()
        try:
            recount(writer.close())
        finally:
            bar.close()
    return bar.counts


def execute_shared(
    grid: CellSource,
    todo: np.ndarray,
    store: ResultStore,
    executor: Executor,
    claims: Claims,
    retry_failed: bool,
    label: str,
    **flush_options: Any,
) -> Counter[str]:
    """`execute_cells` over the blocks of the grid this driver claims (runner.store.claims), claimed
    lazily as the executor asks for work (runner.execute.waves): drivers started on the same grid and root split
    its cells, and take over those of a dead one. `todo` indexes the grid's cells."""

    def still_todo(positions: np.ndarray) -> np.ndarray:
        return plan_grid(grid, store, retry_failed, positions).todo

    claims.start()
    try:
        source = WaveSource(claims, grid, todo, still_todo)
        return execute_cells(source, store, executor, label, total=len(todo), waves=source, **flush_options)
    finally:
        claims.close()  # after the last commit: what this driver leaves unfinished is free at once


def run_grid(
    source: str | Path | Mapping[str, Any] | Grid | GridFile,
    results: str | Path = "results",
    executor: str | Executor = "ray",
    *,
    retry_failed: bool = False,
    only: Iterable[str] | None = None,
    progress: bool = True,
    close_executor: bool = True,
    flush_every: int = 256,
    flush_s: float = 2.0,
    share: bool = True,
    lease_s: float | None = None,
    **executor_options: Any,
) -> RunReport:
    """Run every cell of a grid not yet in the store. `only` restricts to (and re-runs) given run ids.
    With `share`, drivers running the same grid on the same root split the work (runner.store.claims;
    a driver is presumed dead `lease_s` after its last heartbeat); `only` never shares: it reruns."""
    grid: CellSource = source if isinstance(source, Grid | GridFile) else load_grid(source)
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
    if executor == "auto" and not executor_options.get("address") and small_work(grid, todo, store):
        executor = "local"  # the in-process executor takes only these of the Ray executor's options
        executor_options = {k: v for k, v in executor_options.items() if k in ("threads", "timeout_s", "batch")}
    runner = make_executor(executor, **executor_options) if len(todo) else None
    if runner is not None:
        # Workers first: a cluster that cannot be reached fails the command before anything is written
        # (an embedded Ray that starts while cells run here only begins to start).
        runner.start()
    write_grid_members(store, grid)
    if runner is None:
        return report
    report.executor = runner.name
    t0 = time.monotonic()
    claims = store.claims(grid_key_of(grid.id_chunks()), lease_s) if share and only is None else None
    flush_options: dict[str, Any] = {"progress": progress, "flush_every": flush_every, "flush_s": flush_s}
    try:
        if claims is None:
            report.counts = execute_cells(
                grid.cells_at(todo), store, runner, grid.name, total=len(todo), **flush_options
            )
        else:
            report.counts = execute_shared(grid, todo, store, runner, claims, retry_failed, grid.name, **flush_options)
            report.executed = sum(report.counts.values())
            report.by_others = max(0, len(todo) - report.executed)
    finally:
        report.wall_s = time.monotonic() - t0
        if close_executor:
            runner.close()
    report.compacted = compact_when_fragmented(store)
    return report


COMPACT_PARTS_ENV = "CONVGRID_COMPACT_PARTS"
DEFAULT_COMPACT_PARTS = 64


def compact_when_fragmented(store: ResultStore, max_parts: int | None = None) -> str | None:
    """Merge the small parts of every folder (a task's runs, curves, attempts, attempt_curves; members,
    trials) holding more than `max_parts` part files (default CONVGRID_COMPACT_PARTS or 64; 0 never):
    reads slow down with the number of parts, and each flush adds some. A bounded merge
    (runner.store.merge): one group of parts at a time, streamed, each group one transaction under the
    writer lock, so it is safe beside other drivers and the driver's memory does not grow with the
    store (`convgrid compact` rewrites whole tasks). Returns its report line, or None."""
    limit = max_parts if max_parts is not None else int(os.environ.get(COMPACT_PARTS_ENV, DEFAULT_COMPACT_PARTS))
    if limit <= 0:
        return None
    from runner.store.merge import merge_parts

    report = merge_parts(store, limit)
    return report.line() if report.parts_in or report.damaged else None


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
