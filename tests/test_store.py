"""The Parquet store: explicit schemas, atomic parts, newest-wins de-duplication, orphan curves."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds

from runner.execute.base import WorkItem
from runner.execute.local import LocalExecutor
from runner.execute.worker import run_item
from runner.grid.schema import task_schemas
from runner.grid.spec import load_grid
from runner.store import ResultStore
from runner.store.flush import write_records
from tests.conftest import done_ids

GRID = {
    "blocks": [
        {"task": "least_squares", "params": {"d_in": 6, "m": 20, "n_iters": 200}, "product": {"lr": [0.01, 0.05, 5.0]}}
    ]
}


def _records(grid_cells):
    return [run_item(WorkItem(c.run_id, c.task, c.params_json())) for c in grid_cells]


def test_written_runs_have_typed_param_summary_and_provenance_columns(tmp_path: Path) -> None:
    cells = load_grid(GRID).cells
    store = ResultStore(tmp_path)
    write_records(store, _records(cells), task_schemas)
    runs = store.read_runs("least_squares").to_pandas()
    assert len(runs) == 3
    assert set(runs["status"]) == {"ok", "diverged"}
    assert runs["lr"].dtype.kind == "f" and runs["n_iters"].dtype.kind == "i"
    for col in (
        "err_final",
        "rate_theory",
        "wall_s",
        "flops",
        "host",
        "code_version",
        "packages",
        "started",
        "finished",
    ):
        assert col in runs and runs[col].notna().all(), col
    diverged = runs[runs["status"] == "diverged"].iloc[0]
    assert diverged["lr"] == 5.0 and diverged["diverged_step"] > 0
    curves = store.read_curves("least_squares").to_pandas()
    assert set(curves["run_id"]) == set(runs["run_id"])
    assert (curves.groupby("run_id")["step"].apply(lambda s: s.is_monotonic_increasing)).all()


def test_newest_row_wins_and_stale_curves_are_skipped(tmp_path: Path) -> None:
    cells = load_grid(GRID).cells[:1]
    store = ResultStore(tmp_path)
    write_records(store, _records(cells), task_schemas)
    write_records(store, _records(cells), task_schemas)  # the same run again (a retry, or a second driver)
    # runs/ is the current state (one row per run); attempts/ keeps both attempts
    assert ds.dataset(tmp_path / "runs", partitioning="hive").count_rows() == 1
    assert ds.dataset(tmp_path / "attempts", partitioning="hive").count_rows() == 2
    assert ds.dataset(tmp_path / "curves", partitioning="hive").count_rows() == cells[0].params.n_iters
    assert store.read_attempts("least_squares").num_rows == 2
    runs = store.read_runs("least_squares")
    assert runs.num_rows == 1
    curves = store.read_curves("least_squares")
    assert curves.num_rows == cells[0].params.n_iters  # one attempt's curve, not two
    assert "batch_id" not in curves.column_names  # curves/ joins runs/ on run_id alone
    old = store.read_curves("least_squares", attempts="superseded")
    assert old.num_rows == cells[0].params.n_iters
    assert set(old["batch_id"].to_pylist()).isdisjoint(runs["batch_id"].to_pylist())
    both = store.read_curves("least_squares", attempts="all")
    assert set(both["batch_id"].to_pylist()) == set(old["batch_id"].to_pylist()) | set(runs["batch_id"].to_pylist())


def test_temporary_and_orphan_files_are_invisible(tmp_path: Path) -> None:
    cells = load_grid(GRID).cells
    store = ResultStore(tmp_path)
    recs = _records(cells)
    write_records(store, recs[:1], task_schemas)
    # a driver killed mid-write leaves a dot-prefixed temporary file: readers ignore it
    part_dir = tmp_path / "runs" / "task=least_squares"
    (part_dir / ".tmp-part-broken.parquet").write_bytes(b"PAR1 half written")
    # a driver killed between the curves part and the runs part leaves orphan curves
    store_curves_only = ResultStore(tmp_path)
    orphan = recs[1]
    import pyarrow as pa

    from runner.grid.schema import curves_schema
    from tasks import get_task

    n = len(orphan.curve["step"])
    table = pa.table(
        {
            "run_id": [orphan.run_id] * n,
            "batch_id": ["dead"] * n,
            "step": orphan.curve["step"],
            "err": orphan.curve["err"],
            "loss": orphan.curve["loss"],
        },
        schema=curves_schema(get_task("least_squares")),
    )
    store_curves_only.write_part(table, "curves", "task=least_squares")
    assert done_ids(store) == {recs[0].run_id}
    assert set(store.read_curves("least_squares")["run_id"].to_pylist()) == {recs[0].run_id}


def test_local_executor_streams_one_record_per_item(tmp_path: Path) -> None:
    cells = load_grid(GRID).cells
    items = [WorkItem(c.run_id, c.task, c.params_json()) for c in cells]
    chunks = list(LocalExecutor(workers=1).execute(items))  # one worker: in this thread, in order
    assert [len(c) for c in chunks] == [1, 1, 1]
    assert [c[0].run_id for c in chunks] == [c.run_id for c in cells]
