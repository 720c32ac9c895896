"""What a grid leaves to run, planned from the store without building a cell: the grid's cells
matched with every stored run of its tasks on their keys, range by range (runner.store.index), so the
driver's memory does not grow with the grid or the store."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from runner.grid import cells as grid_cells
from runner.grid.cells import Cell, CellSource, Grid
from runner.store import ResultStore
from runner.store.index import CELL_ROW, settled_cells
from runner.store.index_keys import run_keys
from runner.store.spill import KeySpill


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
    """The grid's cells (or those at `indices`) that are final, skipped (failed, with retry_failed off)
    or still to run, each run's newest stored row deciding."""
    todo = np.zeros(len(grid), dtype=bool)
    done = skipped = 0
    with cell_keys(grid, indices) as cells:
        for rows, final, skip in settled_cells(store, grid.tasks(), cells, retry_failed):
            todo[rows["index"][~(final | skip)]] = True
            done += int(final.sum())
            skipped += int(skip.sum())
    return GridPlan(np.flatnonzero(todo), done, skipped)


def plan(cells: Sequence[Cell], store: ResultStore, retry_failed: bool = False) -> tuple[list[Cell], int, int]:
    """(cells to run, how many are already done, how many failed ones are skipped) of a list of cells."""
    planned = plan_grid(Grid("", "", "", list(cells)), store, retry_failed)
    return [cells[i] for i in planned.todo.tolist()], planned.done, planned.skipped


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


def expected_seconds(grid: CellSource, todo: np.ndarray, store: ResultStore, within_s: float) -> float | None:
    """How long the cells at `todo` would take in one process, by the median stored wall time of each
    task's runs; None where that is unknown (a task with no stored runs) or surely not within `within_s`
    (a run costs at least about a millisecond of record and store work, so more runs than that allows
    are not counted)."""
    if not len(todo):
        return 0.0
    tasks, _ = grid.task_and_block(todo[: int(within_s * 1000) + 1])
    if len(tasks) > within_s * 1000:
        return None
    total = 0.0
    for task, count in Counter(tasks.tolist()).items():
        times = store.read_runs(task, columns=["wall_s"])["wall_s"].drop_null()
        if len(times) == 0:
            return None
        total += count * float(pc.approximate_median(times).as_py())
    return total
