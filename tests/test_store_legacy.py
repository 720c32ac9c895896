"""A store written before the current layout (`task` inside the files, several attempts per run in
runs/, curves of superseded attempts in curves/): convgrid reads it right as it is, a driver can add
to it, and one `convgrid compact` converts it so that plain Parquet clients read it right too."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from runner import ResultStore, run_grid
from runner.cli import main
from runner.grid.schema import task_schemas
from runner.store.merge import merge_parts
from tests.options import opts

T0, T1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)


def _legacy(root: Path) -> None:
    runs_schema, curves_schema = task_schemas("faulty")
    legacy = runs_schema.remove(runs_schema.get_field_index("curve_rows")).insert(1, pa.field("task", pa.string()))
    base = {"task": "faulty", "version": "1", "params_json": "{}", "x": 1.0}
    rows = [
        {**base, "run_id": "r1", "status": "failed", "batch_id": "a", "finished": T0, "error": "boom"},
        {**base, "run_id": "r2", "status": "ok", "batch_id": "a", "finished": T0, "square": 4.0},
        {**base, "run_id": "r1", "status": "ok", "batch_id": "b", "finished": T1, "square": 1.0},
    ]
    (root / "runs" / "task=faulty").mkdir(parents=True)
    (root / "curves" / "task=faulty").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows[:2], schema=legacy), root / "runs/task=faulty/part-0001-a.parquet")
    pq.write_table(pa.Table.from_pylist(rows[2:], schema=legacy), root / "runs/task=faulty/part-0002-b.parquet")
    curves = [
        {"run_id": "r1", "batch_id": "a", "step": 0, "value": 9.0},
        {"run_id": "r2", "batch_id": "a", "step": 0, "value": 2.0},
        {"run_id": "r1", "batch_id": "b", "step": 0, "value": 1.0},
    ]
    legacy_curves = curves_schema.insert(1, pa.field("batch_id", pa.string(), nullable=False))  # as it was
    pq.write_table(pa.Table.from_pylist(curves, schema=legacy_curves), root / "curves/task=faulty/part-0001-a.parquet")


def test_a_legacy_store_reads_right_takes_new_runs_and_compacts_into_the_current_layout(tmp_path: Path) -> None:
    _legacy(tmp_path)
    store = ResultStore(tmp_path)
    runs = store.read_runs("faulty").to_pandas().set_index("run_id")
    assert list(runs.index) == ["r1", "r2"] and runs.loc["r1", "status"] == "ok" and runs.loc["r1", "task"] == "faulty"
    curves = store.read_curves("faulty").to_pandas()
    assert sorted(zip(curves["run_id"], curves["value"], strict=True)) == [("r1", 1.0), ("r2", 2.0)]

    run_grid({"name": "more", "blocks": [{"task": "faulty", "params": {"x": 7.0}}]}, tmp_path, opts())
    assert ResultStore(tmp_path).read_runs("faulty").num_rows == 3
    merge_parts(ResultStore(tmp_path), max_parts=1)  # legacy parts and parts without the attempt id, as one
    assert len(list((tmp_path / "curves/task=faulty").glob("*.parquet"))) == 1
    curves = ResultStore(tmp_path).read_curves("faulty").to_pandas()
    assert sorted(zip(curves["run_id"], curves["value"], strict=True))[1:] == [("r1", 1.0), ("r2", 2.0)]

    (tmp_path / "runs/task=faulty/.tmp-part-0003-dead.parquet").write_bytes(b"PAR1 half written")  # old crash
    assert main(["compact", str(tmp_path)]) == 0
    assert not list(tmp_path.rglob(".tmp-*"))
    for part in (tmp_path / "runs" / "task=faulty").glob("*.parquet"):
        assert "task" not in pq.read_schema(part).names
    plain = pd.read_parquet(tmp_path / "runs" / "task=faulty")
    assert {"r1", "r2"} <= set(plain["run_id"]) and len(plain) == 3
    assert plain.set_index("run_id").loc["r1", "status"] == "ok"
    plain_curves = pd.read_parquet(tmp_path / "curves" / "task=faulty")
    assert len(plain_curves) == 3 and "batch_id" not in plain_curves  # the current layout: no attempt id
    assert 9.0 not in set(plain_curves["value"])  # r1's failed attempt "a" left curves/
    old = pd.read_parquet(tmp_path / "attempt_curves" / "task=faulty")
    assert list(zip(old["run_id"], old["batch_id"], old["value"], strict=True)) == [("r1", "a", 9.0)]
    history = pd.read_parquet(tmp_path / "attempts" / "task=faulty")["run_id"].value_counts()
    assert history["r1"] == 2 and history["r2"] == 1 and len(history) == 3  # both attempts of r1 kept
