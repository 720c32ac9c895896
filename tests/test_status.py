"""`convgrid status`: its counts per task, grid and (grid, task), and its list of failures, against an
independent count of what the store's reader sees (runner.store.status counts over keys of the ids)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner import ResultStore, run_grid
from runner.grid.spec import load_grid
from tests.faulty_inputs import grid_with_a_failure
from tests.options import opts


@pytest.fixture(autouse=True, params=["held", "spilled"])
def spill_limit(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every count twice: the runs and members in memory, and spilled to range files past 2 rows."""
    monkeypatch.setenv("CONVGRID_SPILL_ROWS", "1000000" if request.param == "held" else "2")


def test_status_counts_as_an_independent_count_of_the_stored_rows(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    import pyarrow as pa

    from runner.run.members import member_row, write_grid_members
    from runner.store.columns import MEMBER_SCHEMA
    from runner.store.status import store_status

    grid = grid_with_a_failure([1.0, 2.0, 3.0], 4.0)
    run_grid(grid, tmp_path, opts())
    store = ResultStore(tmp_path)
    other = load_grid({"name": "g", "blocks": [{"task": "faulty", "product": {"x": [1.0, 9.0]}}]})
    write_grid_members(store, other)  # x=9 never ran: missing
    again = {**member_row(other.cells[0], other.name, "grid", other.source), "added": datetime.now(UTC)}
    store.write_part(pa.Table.from_pylist([again], schema=MEMBER_SCHEMA), "members")  # a (grid, run) twice: once
    report = store_status(store)
    runs = store.read_runs(columns=["task", "status"]).to_pandas()
    members = store.read_members().to_pandas().drop_duplicates(["grid", "run_id"])
    joined = members.merge(runs[["run_id", "status"]], on="run_id", how="left").fillna({"status": "missing"})
    assert report.by_task == {t: dict(g["status"].value_counts()) for t, g in runs.groupby("task")}
    assert report.by_grid == {k: dict(g["status"].value_counts()) for k, g in joined.groupby("grid")}
    assert report.by_grid == {"f": {"ok": 3, "failed": 1}, "g": {"ok": 1, "missing": 1}}
    expected = {k: dict(g["status"].value_counts()) for k, g in joined.groupby(["grid", "task"])}
    assert report.by_grid_task == expected
    failed = runs[runs["status"] == "failed"]
    first_lines = [
        e.strip().splitlines()[0] for e in store.read_runs("faulty", ["error"]).to_pandas()["error"].dropna()
    ]
    assert report.errors == [("faulty", failed["run_id"].iloc[0], first_lines[0])] and len(first_lines) == 1


def test_status_counts_retries_and_legacy_ids_as_the_stores_reader_sees_them(tmp_path: Path) -> None:
    """`status` counts over keys of the ids: a run failed then ok (no error listed), one ok then failed
    (its newest error listed), ids that are not run ids (a hand-written store's), a run two grids share."""
    from datetime import UTC, datetime, timedelta

    import pyarrow as pa

    from runner.store.columns import MEMBER_SCHEMA
    from runner.store.status import store_status

    grid = {"name": "f", "blocks": [{"task": "faulty", "product": {"x": [1.0, 2.0, 3.0]}}]}
    run_grid(grid, tmp_path, opts())
    store = ResultStore(tmp_path)
    template = store.read_runs("faulty").slice(0, 1).to_pylist()[0]
    ids = sorted(store.read_runs("faulty", ["status"])["run_id"].to_pylist())
    later = datetime.now(UTC) + timedelta(hours=1)

    def row(run_id: str, status: str, error: str | None, when: datetime) -> dict[str, Any]:
        return {**template, "run_id": run_id, "status": status, "error": error, "finished": when, "batch_id": run_id}

    rows = [
        row(ids[0], "failed", "boom one\nat line 3", later),  # ok, then failed: the newest error is listed
        row("r-legacy", "failed", "legacy boom", later),
        row("r-legacy", "ok", None, later + timedelta(minutes=1)),  # failed then ok: not listed
        row("R-other", "timeout", "too slow", later),
    ]
    schema = store.read_runs("faulty").schema
    store.write_part(
        pa.Table.from_pylist(rows, schema=schema.remove(schema.get_field_index("task"))), "runs/task=faulty"
    )
    members = [
        {"run_id": rid, "task": "faulty", "grid": "g", "kind": "grid", "source": None, "block": 0, "added": later}
        for rid in (ids[0], ids[1], "r-legacy", "R-other", "r-never-ran")
    ]
    members.append({**members[0], "grid": "h"})
    store.write_part(pa.Table.from_pylist(members, schema=MEMBER_SCHEMA), "members")

    report = store_status(store)
    runs = store.read_runs(columns=["task", "status", "error"]).to_pandas()  # the reader's newest rows
    assert report.by_task == {"faulty": dict(runs["status"].value_counts())}
    assert report.by_task["faulty"] == {"ok": 3, "failed": 1, "timeout": 1}
    asked = store.read_members().to_pandas().drop_duplicates(["grid", "run_id"])
    joined = asked.merge(runs[["run_id", "status"]], on="run_id", how="left").fillna({"status": "missing"})
    assert report.by_grid == {k: dict(g["status"].value_counts()) for k, g in joined.groupby("grid")}
    assert report.by_grid == {
        "f": {"ok": 2, "failed": 1},
        "g": {"failed": 1, "ok": 2, "timeout": 1, "missing": 1},
        "h": {"failed": 1},
    }
    expected = {k: dict(g["status"].value_counts()) for k, g in joined.groupby(["grid", "task"])}
    assert report.by_grid_task == expected
    assert report.errors == sorted(
        [("faulty", ids[0], "boom one"), ("faulty", "R-other", "too slow")], key=lambda e: e[1]
    )


def test_a_cooperative_timeout_is_listed_with_its_reason(tmp_path: Path) -> None:
    """A run stopped at its deadline said only `timeout` (its error was null), and status listed failures
    by their error: the exit message sent the user to `convgrid status`, which listed nothing."""
    from runner.execute.local import LocalExecutor
    from runner.store.status import store_status

    grid = {"name": "slow", "blocks": [{"task": "faulty", "params": {"sleep_s": 5.0}}, {"task": "faulty"}]}
    report = run_grid(grid, tmp_path, opts(), executor=LocalExecutor(timeout_s=0.2))
    assert report.counts == {"ok": 1, "timeout": 1}
    status = store_status(ResultStore(tmp_path), verify=False)
    ((task, _, reason),) = status.errors
    assert task == "faulty" and reason.startswith("timeout: stopped at its 0.2 s deadline after 0.")
    assert "timeout: stopped at its 0.2 s deadline" in status.format()
