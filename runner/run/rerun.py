"""Reruns of stored runs without their grid file (`convgrid run --only RUN_ID`): their cells rebuilt
from the params the store recorded."""

from __future__ import annotations

import json
from collections.abc import Iterable

from runner.errors import ConfigError
from runner.grid.cells import Cell
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
