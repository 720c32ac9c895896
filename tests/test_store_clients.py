"""Any Parquet client reads a settled store right with no convgrid code: pandas, DuckDB and polars on a
store of three tasks (least_squares, deep_linear, the test learner faulty) after reruns and retries
give one row per run (its newest attempt) with the task's columns and types, and curves only of the
kept attempts; the attempt history stays in attempts/. The queries are the README's one-liners."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import polars as pl
import pyarrow.dataset as ds
import pytest

from runner import ResultStore, run_grid
from runner.cli import main
from runner.store.columns import SHARED_RUN_COLUMNS
from tests.conftest import done_ids
from tests.options import opts

GRID = {
    "name": "three",
    "blocks": [
        {"task": "least_squares", "params": {"d_in": 6, "m": 20, "n_iters": 40}, "product": {"lr": [0.01, 0.05, 9.0]}},
        {"task": "faulty", "product": {"x": [1.0, 2.0]}},
        {"task": "faulty", "params": {"x": 3.0, "fail": True}},
        {
            "task": "deep_linear",
            "params": {"algo": "gd", "d_in": 8, "d_out": 2, "m": 30, "lr": 0.05, "n_iters": 20},
            "product": {"L": [1, 2]},
        },
    ],
}
TASKS = ["deep_linear", "faulty", "least_squares"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store after a first run, a --retry-failed rerun of the failed run, an --only rerun of an ok
    run of each of two tasks, and a grown grid: several attempts for some runs."""
    path = tmp_path_factory.mktemp("clients")
    run_grid(GRID, path, opts())
    run_grid(GRID, path, opts(), retry_failed=True)
    store = ResultStore(path)
    for task in ("least_squares", "deep_linear"):
        rid = sorted(done_ids(store, task))[0]
        assert main(["run", "--only", rid, "--results", str(path), "--executor", "local", "--no-progress"]) == 0
    grown = {**GRID, "blocks": [*GRID["blocks"], {"task": "faulty", "params": {"x": 4.0}}]}
    run_grid(grown, path, opts())
    return path


def _attempt_counts(root: Path) -> pd.Series:
    table = ds.dataset(root / "attempts", partitioning="hive").to_table(columns=["run_id"])
    return table.to_pandas()["run_id"].value_counts()


def test_the_fixture_has_retried_runs(root: Path) -> None:
    counts = _attempt_counts(root)
    assert (counts == 2).sum() == 3 and len(counts) == 9  # 3 runs with two attempts, 9 runs in all


def _expected(root: Path, task: str) -> pd.DataFrame:
    """convgrid's own reader, without the partition column (a one-folder read has no path key)."""
    frame = ResultStore(root).read_runs(task).to_pandas().drop(columns=["task"])
    return frame.sort_values("run_id").reset_index(drop=True)


def _same(frame: pd.DataFrame, expected: pd.DataFrame) -> None:
    frame = frame.drop(columns=[c for c in ("task",) if c in frame]).sort_values("run_id").reset_index(drop=True)
    assert list(frame["run_id"]) == list(expected["run_id"])  # one row per run, the same runs
    assert set(frame.columns) == set(expected.columns)
    for col in frame.columns:  # DuckDB names UTC "Etc/UTC": the same zone, the same instants
        if isinstance(frame[col].dtype, pd.DatetimeTZDtype):
            frame[col] = frame[col].dt.tz_convert("UTC")
    pd.testing.assert_frame_equal(frame[expected.columns], expected, check_dtype=True)


@pytest.mark.parametrize("task", TASKS)
def test_pandas_reads_one_task_as_convgrid_does(root: Path, task: str) -> None:
    _same(pd.read_parquet(root / "runs" / f"task={task}"), _expected(root, task))


@pytest.mark.parametrize("task", TASKS)
def test_duckdb_reads_one_task_as_convgrid_does(root: Path, task: str) -> None:
    query = f"SELECT * FROM read_parquet('{root}/runs/task={task}/*.parquet', hive_partitioning=1)"
    table = duckdb.sql(query).arrow().read_all()
    assert set(table["task"].to_pylist()) == {task}  # the key from the path, not also from the file
    _same(table.to_pandas(), _expected(root, task))


@pytest.mark.parametrize("task", TASKS)
def test_polars_reads_one_task_as_convgrid_does(root: Path, task: str) -> None:
    frame = pl.scan_parquet(f"{root}/runs/task={task}/*.parquet", hive_partitioning=True).collect()
    assert set(frame["task"].to_list()) == {task}
    _same(frame.to_arrow().to_pandas(), _expected(root, task))


def test_typed_columns_are_typed(root: Path) -> None:
    ls = pd.read_parquet(root / "runs" / "task=least_squares")
    assert ls["lr"].dtype.kind == "f" and ls["n_iters"].dtype.kind == "i" and ls["finished"].dtype.kind == "M"
    faulty = pl.read_parquet(f"{root}/runs/task=faulty/*.parquet")
    assert faulty.schema["fail"] == pl.Boolean and faulty.schema["square"] == pl.Float64
    deep = duckdb.sql(f"SELECT L, algo FROM read_parquet('{root}/runs/task=deep_linear/*.parquet')").types
    assert [str(t) for t in deep] == ["BIGINT", "VARCHAR"]


def test_whole_runs_folder_one_row_per_run_in_every_client(root: Path) -> None:
    expected = ResultStore(root).read_runs(columns=SHARED_RUN_COLUMNS).to_pandas()
    ids = sorted(expected["run_id"])
    assert len(ids) == len(set(ids)) == 9
    frame = pd.read_parquet(root / "runs", columns=SHARED_RUN_COLUMNS)
    assert sorted(frame["run_id"]) == ids and set(frame["task"]) == set(TASKS)
    union = duckdb.sql(f"SELECT * FROM read_parquet('{root}/runs/*/*.parquet', hive_partitioning=1, union_by_name=1)")
    union_frame = union.df()
    assert sorted(union_frame["run_id"]) == ids
    # the union of the tasks' columns: each task's own columns are there, filled for its rows
    assert {"lr", "x", "L", "square", "err_final"} <= set(union_frame.columns)
    assert union_frame.loc[union_frame["task"] == "faulty", "x"].notna().all()
    shared = (
        pl.scan_parquet(f"{root}/runs/", hive_partitioning=True, missing_columns="insert", extra_columns="ignore")
        .select(SHARED_RUN_COLUMNS)
        .collect()
    )
    assert sorted(shared["run_id"].to_list()) == ids
    by_task = shared.group_by("task").len().sort("task")
    assert by_task["task"].to_list() == TASKS and sum(by_task["len"].to_list()) == 9


@pytest.mark.parametrize("task", TASKS)
def test_curves_hold_only_kept_attempts_in_every_client(root: Path, task: str) -> None:
    kept = set(ResultStore(root).read_runs(task, columns=["batch_id"])["run_id"].to_pylist())
    expected = ResultStore(root).read_curves(task).num_rows
    folder = f"{root}/curves/task={task}"
    frames = [
        pd.read_parquet(folder),
        duckdb.sql(f"SELECT * FROM read_parquet('{folder}/*.parquet', hive_partitioning=1)").df(),
        pl.read_parquet(f"{folder}/*.parquet").to_pandas(),
    ]
    for frame in frames:
        assert len(frame) == expected > 0
        assert set(frame["run_id"]) <= kept and "batch_id" not in frame  # joins runs/ on run_id alone
        assert not frame.duplicated(["run_id", "step"]).any()


def test_curves_of_a_rerun_are_the_new_attempts_only(root: Path) -> None:
    counts = _attempt_counts(root)
    store = ResultStore(root)
    rerun = [rid for rid in done_ids(store, "least_squares") if counts.get(rid, 0) == 2]
    assert len(rerun) == 1
    attempts = store.read_attempts("least_squares").to_pandas()
    batches = attempts.loc[attempts["run_id"] == rerun[0], "batch_id"].tolist()
    assert len(batches) == 2
    curves = pd.read_parquet(root / "curves" / "task=least_squares")
    assert (curves["run_id"] == rerun[0]).sum() == 40  # one attempt's rows
    old = pd.read_parquet(root / "attempt_curves" / "task=least_squares")
    assert set(old.loc[old["run_id"] == rerun[0], "batch_id"]) == {batches[0]}  # the other is history


def test_the_attempt_history_is_kept(root: Path) -> None:
    history = duckdb.sql(
        "SELECT task, count(*) AS n, count(DISTINCT run_id) AS runs "
        f"FROM read_parquet('{root}/attempts/*/*.parquet', hive_partitioning=1, union_by_name=1) "
        "GROUP BY task ORDER BY task"
    ).fetchall()
    assert history == [("deep_linear", 3, 2), ("faulty", 5, 4), ("least_squares", 4, 3)]
    failed = ResultStore(root).read_attempts("faulty").to_pandas()
    assert (failed["status"] == "failed").sum() == 2  # the failure and its --retry-failed attempt


def test_a_new_task_rewrites_no_other_tasks_files(tmp_path: Path) -> None:
    run_grid({"name": "a", "blocks": [GRID["blocks"][0]]}, tmp_path, opts())
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("task=least_squares/*.parquet"))
    run_grid({"name": "b", "blocks": [GRID["blocks"][1]]}, tmp_path, opts())
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("task=least_squares/*.parquet"))
    assert before == after and len(before) == 3  # runs, curves, attempts: untouched


def test_compact_keeps_what_every_client_reads(root: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    before = {t: _expected(copy, t) for t in TASKS}
    assert main(["compact", str(copy)]) == 0
    for task in TASKS:
        _same(pd.read_parquet(copy / "runs" / f"task={task}"), before[task])
        assert len(list((copy / "runs" / f"task={task}").glob("*.parquet"))) == 1
    assert len(_attempt_counts(copy)) == 9 and _attempt_counts(copy).sum() == 12
