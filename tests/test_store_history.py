"""The attempt history keeps the curves of superseded attempts (attempt_curves/), out of every curves/
reader's way, readable through `read_curves(..., attempts=...)`, and through `compact`."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from runner import ResultStore, run_grid
from runner.store.compact import compact
from tests.options import opts

GRID = {"name": "history", "blocks": [{"task": "faulty", "product": {"x": [1.0, 2.0, 3.0]}}]}


def _pairs(table: pa.Table | pd.DataFrame) -> list[tuple[str, str]]:
    frame = table.to_pandas() if isinstance(table, pa.Table) else table
    return sorted(zip(frame["run_id"], frame["batch_id"], strict=True))


def test_superseded_curves_are_kept_beside_the_current_ones(tmp_path: Path) -> None:
    root = str(tmp_path / "res")
    run_grid(GRID, root, opts())
    store = ResultStore(root)
    first = store.read_runs("faulty", ["x"]).to_pandas()
    rerun = str(first.loc[first["x"] == 2.0, "run_id"].iloc[0])
    run_grid(GRID, root, opts(), only=[rerun])
    run_grid(GRID, root, opts(), only=[rerun])  # a third attempt: two superseded now

    def check() -> None:
        store = ResultStore(root)
        attempts = store.read_attempts("faulty", ["run_id", "batch_id"])
        assert attempts.num_rows == 5
        kept = store.read_runs("faulty", ["batch_id"])
        old = [(r, b) for r, b in _pairs(attempts) if (r, b) not in set(_pairs(kept))]
        assert [r for r, _ in old] == [rerun, rerun]
        current = store.read_curves("faulty")
        assert sorted(current["run_id"].to_pylist()) == [r for r, _ in _pairs(kept)]  # one row per run
        assert _pairs(store.read_curves("faulty", attempts="superseded")) == old
        every = store.read_curves("faulty", attempts="all")
        assert _pairs(every) == sorted(_pairs(kept) + old) and every["value"].to_pylist().count(2.0) == 3
        assert _pairs(store.read_curves("faulty", run_ids=[rerun], attempts="superseded")) == old
        plain = pd.read_parquet(Path(root, "curves", "task=faulty"))  # a plain reader sees the current state
        assert sorted(plain["run_id"]) == [r for r, _ in _pairs(kept)]
        assert _pairs(pd.read_parquet(Path(root, "attempt_curves", "task=faulty"))) == old

    check()
    compact(ResultStore(root))
    assert len(list(Path(root, "attempt_curves", "task=faulty").iterdir())) == 1
    check()
    compact(ResultStore(root))  # compacting a compacted store changes nothing
    check()
    with pytest.raises(ValueError, match="kept, superseded, all"):
        ResultStore(root).read_curves("faulty", attempts="every")
