"""Reading the store into pandas: only the partitions and columns asked for (pyarrow.dataset),
newest row per run, curves of those rows only. Reads Parquet alone, never task code."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from runner.store import latest_per_run, open_root

Filters = Mapping[str, Any]


def _dataset(fs: pafs.FileSystem, path: str) -> ds.Dataset | None:
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    dataset = ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive")
    files = list(dataset.get_fragments())
    if len(files) > 1:
        # Parts written by different task versions may differ in columns: read with their union.
        schema = pa.unify_schemas([f.physical_schema for f in files], promote_options="permissive")
        dataset = ds.dataset(path, filesystem=fs, format="parquet", partitioning="hive", schema=schema)
    return dataset


def _expression(filters: Filters | None) -> ds.Expression | None:
    expr = None
    for key, value in (filters or {}).items():
        many = isinstance(value, list | tuple | set)
        term = pc.field(key).isin(list(value)) if many else pc.field(key) == value
        expr = term if expr is None else expr & term
    return expr


def task_names(root: str | os.PathLike[str]) -> list[str]:
    fs, base = open_root(root)
    path = f"{base}/runs"
    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return []
    infos = fs.get_file_info(pafs.FileSelector(path))
    return sorted(
        i.base_name.split("=", 1)[1] for i in infos if i.type == pafs.FileType.Directory and "=" in i.base_name
    )


def members(root: str | os.PathLike[str], grid: str | None = None) -> pd.DataFrame:
    """Which grid/study asked for which run (one row per pair)."""
    fs, base = open_root(root)
    dataset = _dataset(fs, f"{base}/members")
    if dataset is None:
        return pd.DataFrame(columns=["run_id", "task", "grid", "kind", "source", "block", "added"])
    table = dataset.to_table(filter=_expression({"grid": grid} if grid else None))
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
    fs, base = open_root(root)
    dataset = _dataset(fs, f"{base}/runs/task={task}")
    if dataset is None:
        raise FileNotFoundError(f"no runs of task {task!r} under {root} (tasks there: {task_names(root)})")
    cols = None if columns is None else list(dict.fromkeys(["run_id", "finished", "status", "batch_id", *columns]))
    # Param filters are pushed into the scan: every attempt of a run has the same params, so
    # filtering before de-duplication is exact. Status filters come after it (attempts differ).
    expr = _expression(filters)
    if grid is not None:
        ids = pa.array(members(root, grid)["run_id"].tolist(), pa.string())
        expr = pc.field("run_id").isin(ids) if expr is None else expr & pc.field("run_id").isin(ids)
    table = latest_per_run(dataset.to_table(columns=cols, filter=expr))
    if statuses is not None:
        table = table.filter(pc.is_in(table["status"], value_set=pa.array(list(statuses))))
    return table.to_pandas().reset_index(drop=True)


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
    fs, base = open_root(root)
    dataset = _dataset(fs, f"{base}/curves/task={task}")
    if dataset is None or runs.empty:
        return pd.DataFrame(columns=["run_id", "step", *(columns or [])])
    cols = None if columns is None else list(dict.fromkeys(["run_id", "batch_id", "step", *columns]))
    run_ids = pa.array(runs["run_id"].astype(str).tolist(), pa.string())
    batches = pa.array(runs["batch_id"].astype(str).tolist(), pa.string())
    # Scan only parts that hold a kept attempt (orphans and stale parts are skipped by the scan),
    # and only the runs asked for. The scan keeps the written order: grouped by run, in step order.
    expr = pc.field("batch_id").isin(pc.unique(batches))
    if not every_run:
        expr = expr & pc.field("run_id").isin(run_ids)
    table = dataset.to_table(columns=cols, filter=expr)
    stale = _runs_with_stale_attempts(fs, base, task, run_ids, batches)
    if len(stale):
        # A kept part may also hold an older attempt of a run retried elsewhere: drop those rows.
        kept_batch = pc.take(batches, pc.index_in(table["run_id"], value_set=run_ids))
        keep = pc.or_(pc.invert(pc.is_in(table["run_id"], value_set=stale)), pc.equal(kept_batch, table["batch_id"]))
        table = table.filter(pc.fill_null(keep, False))
    return table.drop_columns(["batch_id"]).to_pandas()


def _runs_with_stale_attempts(
    fs: pafs.FileSystem, base: str, task: str, run_ids: pa.Array, batches: pa.Array
) -> pa.Array:
    """Run ids (among those asked for) that have a runs row in a batch other than their kept one."""
    dataset = _dataset(fs, f"{base}/runs/task={task}")
    assert dataset is not None
    rows = dataset.to_table(columns=["run_id", "batch_id"])
    kept = pc.take(batches, pc.index_in(rows["run_id"], value_set=run_ids))
    stale = pc.and_(pc.is_valid(kept), pc.not_equal(kept, rows["batch_id"]))
    return pc.unique(rows["run_id"].filter(pc.fill_null(stale, False)))
