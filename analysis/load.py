"""Reading the store into pandas, through runner.store (the read rules live there): only the columns
and rows asked for, newest attempt per run, curves of those attempts only. Never task code."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from runner.store import ResultStore
from tasks.status import FINAL_STATUSES

Filters = Mapping[str, Any]


def _expression(filters: Filters | None) -> ds.Expression | None:
    expr = None
    for key, value in (filters or {}).items():
        many = isinstance(value, list | tuple | set)
        term = pc.field(key).isin(list(value)) if many else pc.field(key) == value
        expr = term if expr is None else expr & term
    return expr


def frame(table: pa.Table) -> pd.DataFrame:
    """`table` in pandas, typed as stored: an integer column with nulls (a param some variants lack, such
    as `width`) stays an integer column, pandas' nullable Int64, where a plain conversion makes it float."""
    out = table.to_pandas()
    for field in table.schema:
        if pa.types.is_integer(field.type) and table[field.name].null_count:
            out[field.name] = table[field.name].to_pandas(types_mapper={field.type: pd.Int64Dtype()}.get)
    return out


def task_names(root: str | os.PathLike[str]) -> list[str]:
    return ResultStore(root).tasks()


def members(root: str | os.PathLike[str], grid: str | None = None) -> pd.DataFrame:
    """Which grid/study asked for which run (one row per pair)."""
    table = ResultStore(root).read_members()
    if grid is not None:
        table = table.filter(pc.equal(table["grid"], grid))
    return table.to_pandas().drop_duplicates(["grid", "run_id"]).reset_index(drop=True)


def load(
    root: str | os.PathLike[str],
    task: str,
    grid: str | None = None,
    filters: Filters | None = None,
    columns: Iterable[str] | None = None,
    statuses: Iterable[str] | None = None,
) -> pd.DataFrame:
    """One row per run of `task` (newest attempt), optionally only runs of `grid`, rows matching
    `filters` ({column: value or list of values}) and the given columns (typed as stored)."""
    store = ResultStore(root)
    if task not in store.tasks():
        raise FileNotFoundError(f"no runs of task {task!r} under {root} (tasks there: {store.tasks()})")
    cols = None if columns is None else list(dict.fromkeys(["run_id", "finished", "status", "batch_id", *columns]))
    # Param filters are pushed into the scan (exact: every attempt of a run has the same params).
    # Status filters come after the newest attempt is chosen (attempts differ in status).
    expr = _expression(filters)
    if grid is not None:
        ids = pa.array(members(root, grid)["run_id"].tolist(), pa.string())
        expr = pc.field("run_id").isin(ids) if expr is None else expr & pc.field("run_id").isin(ids)
    table = store.read_runs(task, cols, expr)
    if statuses is not None:
        table = table.filter(pc.is_in(table["status"], value_set=pa.array(list(statuses))))
    return frame(table).reset_index(drop=True)


def finished(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that are results: a final status (ok or diverged, `tasks.status.FINAL_STATUSES`); a
    pruned, failed or timed-out run is not one. A frame without a status column is taken as it is."""
    return runs[runs["status"].isin(sorted(FINAL_STATUSES))] if "status" in runs else runs


def finished_runs(root: str | os.PathLike[str], task: str, sources: Sequence[str]) -> pd.DataFrame:
    """The finished runs of `task` that any of the grids or studies `sources` asked for, one row per
    (run, source), with a `grid` column naming the source (a source not in the store gives no rows)."""
    frames = []
    for source in sources:
        try:
            frames.append(finished(load(root, task, grid=source)).assign(grid=source))
        except FileNotFoundError:  # no run of the task at all
            frames.append(pd.DataFrame(columns=["run_id", "status", "grid"]))
    nonempty = [f for f in frames if not f.empty]  # concat with an empty frame would turn typed columns to object
    if nonempty:
        return pd.concat(nonempty, ignore_index=True)
    return frames[0].reset_index(drop=True) if frames else pd.DataFrame(columns=["run_id", "status", "grid"])


def curves(
    root: str | os.PathLike[str],
    task: str,
    runs: pd.DataFrame | None = None,
    grid: str | None = None,
    columns: Iterable[str] | None = None,
) -> pd.DataFrame:
    """Curve rows (run_id, step, ...) of the newest attempt of each run in `runs` (default: all runs
    of the task, or of `grid`), grouped by run in step order."""
    every_run = runs is None and grid is None
    if runs is None:
        runs = load(root, task, grid=grid, columns=[])
    store = ResultStore(root)
    if runs.empty or task not in store.tasks():
        return pd.DataFrame(columns=["run_id", "step", *(columns or [])])
    keys = pa.table(
        {
            "run_id": pa.array(runs["run_id"].astype(str).tolist(), pa.string()),
            "batch_id": pa.array(runs["batch_id"].astype(str).tolist(), pa.string()),
        }
    )
    wanted = None if columns is None else list(columns)
    table = store.read_curves(
        task, run_ids=None if every_run else keys["run_id"].to_pylist(), columns=wanted, keys=keys, sort=False
    )
    return frame(table)
