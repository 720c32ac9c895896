"""members/: which grid or study asked for which run. A run can belong to many; a grid's rows are
written once, before its cells run, so a killed command's grid still lists every cell it asked for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa

from runner.grid.cells import Cell, CellSource
from runner.run.plan import cell_keys
from runner.store import ResultStore
from runner.store.columns import MEMBER_SCHEMA
from runner.store.index import lookup, member_spill
from runner.store.layout import MEMBERS
from runner.store.spill import matched

MEMBER_PART_ROWS = 262_144  # members rows per part file: a million-cell grid writes four, never holds all


def write_grid_members(store: ResultStore, grid: CellSource, kind: str = "grid") -> int:
    """Link every cell of `grid` to it in members/, the rows not already there (matched on keys range by
    range, as planning does), written in parts of MEMBER_PART_ROWS rows built column-wise from the run
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
        store.write_part(table, MEMBERS)
    return len(new)


def member_row(cell: Cell, grid: str, kind: str, source: str | None) -> dict[str, Any]:
    """The members/ row saying that grid or study `grid` asked for `cell`'s run."""
    return {"run_id": cell.run_id, "task": cell.task, "grid": grid, "kind": kind, "source": source, "block": cell.block}
