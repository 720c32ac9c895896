"""Reruns of stored runs without their grid file (`convgrid run --only RUN_ID`): their cells rebuilt
from the params the store recorded."""

from __future__ import annotations

import json
from collections.abc import Iterable

from runner.errors import ConfigError
from runner.grid.cells import Cell, CellSource
from runner.grid.identity import run_id, validate_params
from runner.store import ResultStore
from tasks import get_spec


def cells_from_store(store: ResultStore, ids: Iterable[str]) -> list[Cell]:
    """Rebuild cells of stored runs (full id or a unique prefix) from their recorded params."""
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


def errors_of(store: ResultStore, grid: CellSource, only: Iterable[str]) -> list[tuple[str, str, str]]:
    """(run id, status, stored error) of the `--only` cells that did not end well: a task's exception is a
    recorded failure, not a crash (runner.execute.worker), so its traceback is in the store's `error`
    column, which the one-line `status` shortens; a rerun for debugging prints it whole."""
    from runner.run.plan import only_indices
    from tasks.status import FAILED, TIMEOUT

    cells = list(grid.cells_at(only_indices(grid, only)))
    wanted = {cell.run_id for cell in cells}
    out = []
    for task_name in sorted({cell.task for cell in cells}):
        rows = store.read_runs(task_name, columns=["status", "error"]).to_pylist()
        out += [(r["run_id"], r["status"], r["error"] or "") for r in rows if r["run_id"] in wanted]
    return sorted(o for o in out if o[1] in (FAILED, TIMEOUT))
