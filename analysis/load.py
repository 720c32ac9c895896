"""Reading the store into pandas, through runner.store (the read rules live there): only the columns
and rows asked for, newest attempt per run, curves of those attempts only. Never task code."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import yaml

from runner.store import ResultStore
from runner.store.columns import legacy_curve_columns
from runner.store.layout import CURVES, RUNS
from tasks.status import ALL_STATUSES, FINAL_STATUSES

Filters = Mapping[str, Any]


def open_store(root: str | os.PathLike[str]) -> ResultStore:
    """The store at `root`; a local `root` that is not a folder is an error (a mistyped path would
    otherwise read as a store with no results)."""
    if "://" not in str(root) and not Path(root).is_dir():
        raise FileNotFoundError(f"no results root at {root}")
    return ResultStore(root)


def names(value: str | Iterable[str] | None, what: str) -> list[str] | None:
    """A list of names from a list or one name: a string is one name, never its letters."""
    if value is None or isinstance(value, str):
        return None if value is None else [value]
    out = list(value)
    if not all(isinstance(v, str) for v in out):
        raise TypeError(f"{what}: give names (strings), got {out!r}")
    return out


def check_names(asked: Iterable[str], valid: Sequence[str], what: str) -> None:
    """ValueError naming the first of `asked` not in `valid`, its closest valid names and all of them."""
    for name in asked:
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=3)
            hint = f" (closest: {', '.join(close)})" if close else ""
            raise ValueError(f"{what}: no {name!r}{hint}; valid: {', '.join(sorted(valid))}")


def _term(key: str, value: Any) -> ds.Expression:
    """Rows whose `key` is `value` (None: a null, as an `optimal` step rule's unset `lr`), or one of the
    values of a list."""
    if not isinstance(value, list | tuple | set):
        return pc.field(key).is_null() if value is None else pc.field(key) == value
    values = list(value)
    return pc.field(key).isin([v for v in values if v is not None]) | (
        pc.field(key).is_null() if None in values else pc.scalar(False)
    )


def _expression(filters: Filters | None) -> ds.Expression | None:
    expr = None
    for key, value in (filters or {}).items():
        term = _term(key, value)
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
    return open_store(root).tasks()


def members(root: str | os.PathLike[str], grid: str | None = None) -> pd.DataFrame:
    """Which grid/study asked for which run (one row per pair); a `grid` the store does not know is an
    error naming those it does."""
    table = open_store(root).read_members()
    if grid is not None:
        check_names([grid], pc.unique(table["grid"]).to_pylist(), f"grids and studies of {root}")
        table = table.filter(pc.equal(table["grid"], grid))
    return table.to_pandas().drop_duplicates(["grid", "run_id"]).reset_index(drop=True)


def load(
    root: str | os.PathLike[str],
    task: str,
    grid: str | None = None,
    filters: Filters | None = None,
    columns: str | Iterable[str] | None = None,
    statuses: str | Iterable[str] | None = None,
) -> pd.DataFrame:
    """One row per run of `task` (newest attempt), optionally only runs of `grid`, rows matching
    `filters` ({column: value, None for a null, or a list of values}), with `statuses`, and the given
    columns (typed as stored). A column, grid or status the store does not have is an error naming the
    valid ones (a misspelt name would otherwise give a column of nulls or no rows)."""
    store = open_store(root)
    if task not in store.tasks():
        raise FileNotFoundError(f"no runs of task {task!r} under {root} (tasks there: {store.tasks()})")
    asked, wanted_statuses = names(columns, "columns"), names(statuses, "statuses")
    stored = store.file_schema(RUNS, task).names
    check_names([*(asked or [])], [*stored, "task"], f"columns of {task}'s runs under {root}")
    check_names([*(filters or {})], stored, f"filters: columns of {task}'s runs under {root}")
    check_names(wanted_statuses or [], ALL_STATUSES, "statuses")
    cols = None if asked is None else list(dict.fromkeys(["run_id", "finished", "status", "batch_id", *asked]))
    # Param filters are pushed into the scan (exact: every attempt of a run has the same params).
    # Status filters come after the newest attempt is chosen (attempts differ in status).
    expr = _expression(filters)
    if grid is not None:
        ids = pa.array(members(root, grid)["run_id"].tolist(), pa.string())
        expr = pc.field("run_id").isin(ids) if expr is None else expr & pc.field("run_id").isin(ids)
    table = store.read_runs(task, cols, expr)
    if wanted_statuses is not None:
        table = table.filter(pc.is_in(table["status"], value_set=pa.array(wanted_statuses, pa.string())))
    return frame(table).reset_index(drop=True)


def finished(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs that are results: a final status (ok or diverged, `tasks.status.FINAL_STATUSES`); a
    pruned, failed or timed-out run is not one. A frame without a status column is taken as it is."""
    return runs[runs["status"].isin(sorted(FINAL_STATUSES))] if "status" in runs else runs


def finished_runs(root: str | os.PathLike[str], task: str, sources: Sequence[str]) -> pd.DataFrame:
    """The finished runs of `task` that any of the grids or studies `sources` asked for, one row per
    (run, source), with a `grid` column naming the source (a source not in the store gives no rows)."""
    frames = []
    present = set(members(root)["grid"])
    empty = pd.DataFrame(columns=["run_id", "status", "grid"])
    for source in sources:
        if source not in present:  # `load` would refuse it, naming the sources there are: here, no rows
            frames.append(empty)
            continue
        try:
            frames.append(finished(load(root, task, grid=source)).assign(grid=source))
        except FileNotFoundError:  # no run of the task at all
            frames.append(empty)
    nonempty = [f for f in frames if not f.empty]  # concat with an empty frame would turn typed columns to object
    if nonempty:
        return pd.concat(nonempty, ignore_index=True)
    return frames[0].reset_index(drop=True) if frames else pd.DataFrame(columns=["run_id", "status", "grid"])


def curves(
    root: str | os.PathLike[str],
    task: str,
    runs: pd.DataFrame | None = None,
    grid: str | None = None,
    columns: str | Iterable[str] | None = None,
) -> pd.DataFrame:
    """Curve rows (run_id, step, ...) of the newest attempt of each run in `runs` (default: all runs
    of the task, or of `grid`), grouped by run in step order. `runs` needs a run_id column; with its
    batch_id (as `load` gives it) the curves are those of exactly those attempts, without it those of
    each run's newest attempt in the store. A column no curve of the task has is an error naming those
    it has."""
    every_run = runs is None and grid is None
    if runs is None:
        runs = load(root, task, grid=grid, columns=[])
    if "run_id" not in runs:
        raise ValueError(f"runs: a frame with a run_id column (as analysis.load gives), got {list(runs.columns)}")
    wanted = names(columns, "columns")
    store = open_store(root)
    if runs.empty or task not in store.tasks():
        return pd.DataFrame(columns=["run_id", "step", *(wanted or [])])
    run_columns = store.file_schema(RUNS, task).names
    legacy = legacy_curve_columns(store.file_schema(CURVES, task).names, run_columns)
    valid = [legacy.get(c, c) for c in store.file_schema(CURVES, task).names]
    # a column of the runs asked of the curves gets the store's own message (the curve's name for it)
    check_names([c for c in wanted or [] if c not in run_columns], valid, f"columns of {task}'s curves under {root}")
    run_ids = runs["run_id"].astype(str).tolist()
    keys = None
    if "batch_id" in runs:
        keys = pa.table(
            {
                "run_id": pa.array(run_ids, pa.string()),
                "batch_id": pa.array(runs["batch_id"].astype(str).tolist(), pa.string()),
            }
        )
    table = store.read_curves(task, run_ids=None if every_run else run_ids, columns=wanted, keys=keys, sort=False)
    return frame(table)


def grid_file(sources: pd.Series) -> dict[str, Any]:
    """The grid or study file that asked for the runs (members' `source`: the path it was run from),
    parsed, where it is still there to read; {} otherwise."""
    for source in sources.dropna().unique():
        try:
            text = yaml.safe_load(Path(str(source)).read_text())
        except (OSError, ValueError, yaml.YAMLError):  # ValueError: a stored source no path can be (a NUL in it)
            continue
        if isinstance(text, dict):
            return text
    return {}
