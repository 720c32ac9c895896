"""Every learner in one results root, read whole by the README's queries (issue 45): pandas,
pyarrow.dataset, DuckDB and polars all give one row per run with the union of the six learners' and the
external toy learner's columns, typed as convgrid reads them; and plain `pd.read_parquet` of one task
keeps nullable integers integers with the README's one argument."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from runner import ResultStore, run_grid
from tasks.registry import builtin_task_names, get_task
from tests.options import opts

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small run of each built-in learner (its first conformance example) and of the toy learner."""
    path = tmp_path_factory.mktemp("six")
    blocks = [{"task": t, "params": get_task(t).examples[0]} for t in builtin_task_names()]
    run_grid({"name": "six", "blocks": [*blocks, {"task": "faulty", "params": {"x": 2.0}}]}, path, opts())
    return path


def _readme_block(marker: str) -> str:
    """The README's code block that follows `marker` (the queries are tested as written)."""
    text = (ROOT / "README.md").read_text()
    return text.split(marker, 1)[1].split("```python\n", 1)[1].split("```", 1)[0]


def test_every_client_reads_every_learners_runs_whole(root: Path) -> None:
    store = ResultStore(root)
    tasks = sorted([*builtin_task_names(), "faulty"])
    assert store.tasks() == tasks and len(tasks) == 7
    expected = {"task"}.union(*(store.file_schema("runs", t).names for t in tasks))
    scope: dict[str, object] = {"R": str(root)}
    exec(_readme_block("Every task's runs with all their columns"), scope)  # noqa: S102 - the README's code
    frames = {name: scope[name] for name in ("table", "pandas_frame", "duckdb_frame", "polars_frame")}
    table = frames["table"]
    assert isinstance(table, pa.Table)
    frames["table"] = table.to_pandas()
    for name, frame in frames.items():
        frame = frame.to_pandas() if isinstance(frame, pl.DataFrame) else frame
        assert isinstance(frame, pd.DataFrame), name
        assert set(frame.columns) == expected, f"{name}: {set(frame.columns) ^ expected}"
        assert sorted(frame["task"]) == tasks, name  # one row per run, its task from the folder name
    # each learner's own columns are filled for its own row: hierarchical's list and ldminv's integer K
    polars = frames["polars_frame"]
    assert isinstance(polars, pl.DataFrame)
    row = polars.filter(pl.col("task") == "hierarchical")["target_widths"].to_list()[0]
    assert isinstance(row, list) and row and all(isinstance(v, int) for v in row)
    assert polars.schema["K"] == pl.Int64 and polars.schema["target_widths"] == pl.List(pl.Int64)
    assert polars.schema["d_out"] == pl.Int64  # deep_linear's and linear_resnet's output dimension, one column


def test_plain_pandas_keeps_nullable_integers_with_one_argument(root: Path) -> None:
    folder = root / "runs" / "task=deep_linear"
    table = ds.dataset(folder).to_table()
    ints = [f.name for f in table.schema if pa.types.is_integer(f.type)]
    nulls = [c for c in ints if table[c].null_count]
    assert "diverged_step" in nulls  # null for a run that did not diverge
    plain = pd.read_parquet(folder)
    assert all(plain[c].dtype == "float64" for c in nulls)  # what plain pandas does to them (113.0)
    kept = pd.read_parquet(folder, dtype_backend="numpy_nullable")  # the README's one argument
    assert all(str(kept[c].dtype) == "Int64" for c in ints), {c: str(kept[c].dtype) for c in ints}
    assert all(kept[c].isna().equals(plain[c].isna()) for c in nulls)
    assert 'dtype_backend="numpy_nullable"' in _readme_block("One task's runs")
