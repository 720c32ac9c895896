"""The pandas view is exact (issue 28): a store of all six learners read whole by pandas, pyarrow.dataset,
DuckDB and polars gives every column of every learner, or fails loudly, never drops one; each task's
rows equal `analysis.load`'s; an integer param that some runs lack stays an integer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import polars as pl
import pyarrow.dataset as ds
import pytest

import analysis
from runner import ResultStore, run_grid
from runner.store.layout import SCHEMA_TASK
from tasks.registry import builtin_task_names, get_task
from tests.options import opts

# linear_resnet's `k` is an int where hierarchical's is a list: a conflict no union can hold
CONFLICTING: set[str] = set()  # columns two learners type differently (tests/test_store_names.py: none)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("six")
    blocks = [{"task": name, "params": get_task(name).examples[0]} for name in builtin_task_names()]
    assert len(blocks) == 6
    report = run_grid({"name": "six", "blocks": blocks}, path, opts())
    assert report.executed == 6
    return path


def _loaded(root: Path) -> dict[str, pd.DataFrame]:
    return {task: analysis.load(root, task).drop(columns=["task"]) for task in ResultStore(root).tasks()}


def _union_columns(loaded: dict[str, pd.DataFrame]) -> set[str]:
    return {c for frame in loaded.values() for c in frame.columns}


def _same_rows(whole: pd.DataFrame, loaded: dict[str, pd.DataFrame], conflicted: set[str]) -> None:
    for task, expected in loaded.items():
        mine = whole[whole["task"].astype(str) == task].sort_values("run_id").reset_index(drop=True)
        for column in expected.columns:
            if column in conflicted:
                continue
            got, want = mine[column].tolist(), expected.sort_values("run_id")[column].tolist()
            assert _equal(got, want), (task, column, got, want)


def _equal(a: list[Any], b: list[Any]) -> bool:
    def norm(v: Any) -> Any:
        if v is None or (isinstance(v, float) and v != v) or v is pd.NA:
            return None
        if hasattr(v, "tolist"):
            return v.tolist()
        if isinstance(v, pd.Timestamp):
            return v.tz_convert("UTC").value if v.tzinfo else v.value
        return v

    return [norm(x) for x in a] == [norm(y) for y in b]


def test_the_union_part_carries_every_column_and_sorts_first(root: Path) -> None:
    parts = sorted((root / "runs").glob("*/*.parquet"))
    assert parts[0].parent.name == f"task={SCHEMA_TASK}"
    assert ResultStore(root).tasks() == sorted(builtin_task_names())  # the union's folder is no task


def test_pandas_and_pyarrow_read_every_column_of_every_learner(root: Path) -> None:
    loaded = _loaded(root)
    union = _union_columns(loaded)
    frame = pd.read_parquet(root / "runs", columns=sorted(union - CONFLICTING) + ["task"])
    assert set(frame.columns) >= union - CONFLICTING and len(frame) == 6  # before: 94 of 99 columns for two
    _same_rows(frame, loaded, CONFLICTING)
    table = ds.dataset(root / "runs", partitioning="hive").to_table(columns=sorted(union - CONFLICTING))
    assert set(table.column_names) == union - CONFLICTING
    # no two learners' columns clash any more (issue 45: hierarchical's `k` is `target_widths`, linear_resnet's
    # `d_out`): the whole store reads in one call, every column of every learner
    whole = pd.read_parquet(root / "runs")
    assert set(whole.columns) >= union and len(whole) == 6


def test_duckdb_and_polars_never_drop_a_column(root: Path) -> None:
    loaded = _loaded(root)
    union = _union_columns(loaded)
    glob = str(root / "runs" / "*" / "*.parquet")
    with pytest.raises(duckdb.Error, match="union_by_name"):  # without it: a loud refusal
        duckdb.sql(f"SELECT * FROM read_parquet('{glob}', hive_partitioning=1)").df()
    frame = duckdb.sql(f"SELECT * EXCLUDE (k) FROM read_parquet('{glob}', hive_partitioning=1, union_by_name=1)").df()
    # DuckDB's names are case-blind: ldminv's `K` and hierarchical's `k` are one column there
    blind = {c.lower() for c in union} - {"k"}
    assert {c.lower() for c in frame.columns} >= blind and len(frame) == 6
    with pytest.raises(pl.exceptions.PolarsError):  # polars' default refuses files that differ
        pl.read_parquet(glob, hive_partitioning=True)
    polars = pl.scan_parquet(
        glob, hive_partitioning=True, missing_columns="insert", extra_columns="ignore", cast_options=None
    ).select(sorted(union - CONFLICTING - {"task"}))
    assert set(polars.collect().columns) == union - CONFLICTING - {"task"}


def test_one_tasks_folder_reads_its_own_columns_only(root: Path) -> None:
    loaded = _loaded(root)
    for task, expected in loaded.items():
        frame = pd.read_parquet(root / "runs" / f"task={task}")
        assert set(frame.columns) == set(expected.columns)


def test_curves_read_whole_keep_every_curve_column(root: Path) -> None:
    store = ResultStore(root)
    union = {c for task in store.tasks() for c in store.file_schema("curves", task).names}
    frame = pd.read_parquet(root / "curves")
    assert set(frame.columns) == union | {"task"}
    assert len(frame) == sum(store.read_curves(task).num_rows for task in store.tasks())


def test_an_integer_param_some_runs_lack_stays_an_integer(tmp_path: Path) -> None:
    grid = {
        "name": "widths",
        "blocks": [
            {
                "task": "deep_linear",
                "params": {"algo": "gd", "d_in": 6, "d_out": 2, "m": 20, "lr": 0.05, "n_iters": 5, "L": 2},
                "product": {"width": [4, None]},
            }
        ],
    }
    run_grid(grid, tmp_path, opts())
    runs = analysis.load(tmp_path, "deep_linear")
    assert str(runs["width"].dtype) == "Int64" and sorted(runs["width"].dropna().tolist()) == [4]
