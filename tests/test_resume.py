"""Resume semantics: finished work is never redone, a grown grid runs only new cells, failures wait
for --retry-failed, --only reruns one run in-process."""

from __future__ import annotations

from pathlib import Path

import pyarrow.dataset as ds
import pytest

from runner import ResultStore, run_grid, store_status
from runner.cli import main
from tests.conftest import done_ids
from tests.faulty_inputs import grid_with_a_failure
from tests.options import opts


def _grid(lrs: list[float]) -> dict:
    return {
        "name": "sweep",
        "blocks": [{"task": "least_squares", "params": {"d_in": 6, "m": 20, "n_iters": 30}, "product": {"lr": lrs}}],
    }


def _physical_rows(root: Path) -> int:
    """Attempts written (runs/ itself holds one row per run: the newest attempt)."""
    return ds.dataset(root / "attempts", partitioning="hive").count_rows()


def test_second_run_executes_nothing_and_grown_grid_only_new_cells(tmp_path: Path) -> None:
    first = run_grid(_grid([0.01, 0.02]), tmp_path, opts())
    assert first.executed == 2 and _physical_rows(tmp_path) == 2
    again = run_grid(_grid([0.01, 0.02]), tmp_path, opts())
    assert again.executed == 0 and again.already_done == 2 and "nothing to run" in again.line()
    assert _physical_rows(tmp_path) == 2
    grown = run_grid(_grid([0.01, 0.02, 0.03, 0.04]), tmp_path, opts())
    assert grown.executed == 2 and grown.already_done == 2
    assert _physical_rows(tmp_path) == 4
    assert len(done_ids(ResultStore(tmp_path))) == 4


def test_failures_are_recorded_with_traceback_and_retried_on_request(tmp_path: Path) -> None:
    grid = grid_with_a_failure([1.0, 2.0], 3.0)
    rep = run_grid(grid, tmp_path, opts())
    assert rep.counts == {"ok": 2, "failed": 1}
    runs = ResultStore(tmp_path).read_runs("faulty").to_pandas()
    error = runs.loc[runs["status"] == "failed", "error"].iloc[0]
    assert "RuntimeError: asked to fail with x=3.0" in error and "Traceback" in error and "toy_learner" in error
    again = run_grid(grid, tmp_path, opts())
    assert again.executed == 0 and again.skipped_failed == 1
    retried = run_grid(grid, tmp_path, opts(), retry_failed=True)
    assert retried.executed == 1 and retried.counts == {"failed": 1}
    status = store_status(ResultStore(tmp_path))
    assert status.by_grid["f"]["ok"] == 2 and status.by_grid["f"]["failed"] == 1
    assert "asked to fail" in status.format()


def test_cooperative_timeout_is_recorded(tmp_path: Path) -> None:
    grid = {"blocks": [{"task": "faulty", "params": {"sleep_s": 5.0}}]}
    rep = run_grid(grid, tmp_path, opts(timeout_s=0.2))
    assert rep.counts == {"timeout": 1}


def test_only_reruns_one_stored_run_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_grid(_grid([0.01, 0.02]), tmp_path, opts())
    rid = sorted(done_ids(ResultStore(tmp_path)))[0]
    assert main(["run", "--only", rid[:10], "--results", str(tmp_path), "--executor", "local", "--no-progress"]) == 0
    assert "ran 1 of 1" in capsys.readouterr().out
    assert _physical_rows(tmp_path) == 3
    assert len(done_ids(ResultStore(tmp_path))) == 2
    assert main(["run", "--only", "ffffffff", "--results", str(tmp_path), "--executor", "local"]) == 2


def test_a_rerun_prints_the_whole_error_of_a_run_that_fails_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task's exception is a recorded failure, its traceback in the store; `status` shows its first line.
    `--only` is how one debugs it (the report says so): the rerun prints the whole error on stderr."""
    grid = {"name": "f", "blocks": [{"task": "faulty", "params": {"x": 3.0, "fail": True}}]}
    run_grid(grid, tmp_path, opts())
    (rid,) = ResultStore(tmp_path).read_runs("faulty", columns=["status"])["run_id"].to_pylist()
    capsys.readouterr()
    assert main(["run", "--only", rid[:10], "--results", str(tmp_path), "--executor", "local", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"run {rid} failed:" in err and "Traceback" in err and "RuntimeError: asked to fail with x=3.0" in err


def test_status_reports_missing_members(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_grid(_grid([0.01]), tmp_path, opts())
    from runner.grid.spec import load_grid
    from runner.run.members import member_row

    grid = load_grid(_grid([0.01, 0.5]))
    ResultStore(tmp_path).write_members([member_row(c, grid.name, "grid", grid.source) for c in grid.cells])
    assert main(["status", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("sweep"))
    assert line.split()[1:] == ["1", "0", "0", "0", "0", "1"]


def test_status_of_a_folder_of_results_roots_names_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`make demo` writes results/demo; `convgrid status results/` found no runs and said only that the
    store is empty, which reads as results gone. It now names the results roots below."""
    run_grid(_grid([0.01]), tmp_path / "demo", opts())
    assert main(["status", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "the store is empty" in captured.out
    assert f"{tmp_path} holds no runs; results roots below it: {tmp_path / 'demo'}" in captured.err
    assert main(["status", str(tmp_path / "demo")]) == 0
    assert "holds no runs" not in capsys.readouterr().err
