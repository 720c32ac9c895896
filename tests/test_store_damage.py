"""Damaged part files: a truncated part, a zero-byte part and flipped bytes, in runs/ or curves/.
Every command stays usable, readers skip the part with a warning naming it, `convgrid status` lists
it, `convgrid compact --repair` moves it to quarantine, the runs whose rows were there run again on
the next `run`, and the content is then what it was before the damage."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import yaml

import analysis
from runner import ResultStore
from runner.store.parts import DamagedPartWarning
from runner.store.txn import QUARANTINE_DIR
from tests.conftest import CliResult, run_cell_by_cell

GRID = {
    "name": "damage",
    "blocks": [
        {"task": "least_squares", "params": {"d_in": 6, "m": 20, "n_iters": 30}, "product": {"lr": [0.01, 0.02, 0.03]}},
        {"task": "faulty", "product": {"x": [1.0, 2.0]}},
    ],
}
# columns that differ between two attempts of the same cell (when and where it ran)
VOLATILE = ["batch_id", "commit_seq", "started", "finished", "wall_s", "host", "device", "code_version", "packages"]


def content(root: Path) -> dict[str, pd.DataFrame]:
    store = ResultStore(root)
    out = {}
    for task in store.tasks():
        runs = store.read_runs(task).to_pandas().drop(columns=VOLATILE)
        out[f"runs/{task}"] = runs.sort_values("run_id").reset_index(drop=True)
        curves = store.read_curves(task).to_pandas()
        out[f"curves/{task}"] = curves.sort_values(["run_id", "step"]).reset_index(drop=True)
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    run_cell_by_cell(GRID, root)  # one part per run, so damage hits one run
    assert len(list((root / "runs").glob("task=[!_]*/*.parquet"))) == 5  # task=_schema: the union (store.union)
    return root


def _damage(path: Path, mode: str) -> None:
    data = path.read_bytes()
    if mode == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif mode == "zero-byte":
        path.write_bytes(b"")
    else:  # flipped bytes in the middle of the file: data pages, caught by their checksums
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes(b ^ 0xFF for b in data[middle : middle + 8]) + data[middle + 8 :])


@pytest.mark.parametrize("mode", ["truncated", "zero-byte", "flipped"])
@pytest.mark.parametrize("kind", ["runs", "curves"])
def test_a_damaged_part_is_skipped_listed_quarantined_and_its_runs_rerun(
    pristine: Path, tmp_path: Path, mode: str, kind: str, cli: Callable[..., CliResult]
) -> None:
    root = tmp_path / "store"
    shutil.copytree(pristine, root)
    before = content(root)
    victim = sorted((root / kind / "task=least_squares").glob("part-*.parquet"))[0]
    _damage(victim, mode)

    # readers: the part is skipped with a warning that names it; everything else reads
    with pytest.warns(DamagedPartWarning, match=victim.name):
        runs = analysis.load(root, "least_squares")
        curves = analysis.curves(root, "least_squares")
    assert len(runs) == (2 if kind == "runs" else 3)
    assert len(curves) == 60  # the lost run's curves are not read (its runs row or its curve rows are gone)
    assert len(analysis.load(root, "faulty")) == 2

    status = cli("status", str(root))
    assert status.returncode == 0, status.stderr
    assert "damaged parts (1" in status.stdout and victim.name in status.stdout
    plain = cli("compact", str(root))  # without --repair the damaged task is left alone
    assert plain.returncode == 0 and "use --repair" in plain.stdout, plain.stderr
    assert victim.exists()
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    dry = cli("run", str(grid), "--results", str(root), "--dry-run")
    assert dry.returncode == 0 and "to run: " + ("1" if kind == "runs" else "0") in dry.stdout, dry.stderr
    assert cli("check", str(root)).returncode == 0

    repaired = cli("compact", str(root), "--repair")
    assert repaired.returncode == 0, repaired.stderr
    assert "moved 1 damaged parts to quarantine (1 runs will run again)" in repaired.stdout
    # a lost runs row leaves its run's 30 intact curve rows: they are the lost attempt's history, kept
    # in attempt_curves/ with its batch_id, not counted as superseded rows and dropped
    moved = 30 if kind == "runs" else 0
    assert ("kept 30 curve rows" in repaired.stdout) == (kind == "runs"), repaired.stdout
    history = ResultStore(root).read_curves("least_squares", attempts="superseded")
    assert history.num_rows == moved
    if moved:
        attempts = ResultStore(root).read_attempts("least_squares", ["batch_id"])
        assert set(history["batch_id"].to_pylist()) <= set(attempts["batch_id"].to_pylist())
    assert not victim.exists()
    assert [p.name for p in (root / QUARANTINE_DIR).rglob("*.parquet")] == [victim.name]
    clean = cli("status", str(root))
    assert "damaged" not in clean.stdout and "missing" in clean.stdout

    rerun = cli("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress")
    assert rerun.returncode == 0, rerun.stderr
    assert "ran 1 of 5 cells" in rerun.stdout
    after = content(root)
    assert after.keys() == before.keys()
    for key in before:
        pd.testing.assert_frame_equal(after[key], before[key], obj=key)
    # and a plain client reads the repaired store right again
    assert len(pd.read_parquet(root / "runs" / "task=least_squares")) == 3
    assert len(pd.read_parquet(root / "curves" / "task=least_squares")) == 90


def test_a_damaged_attempts_part_costs_no_run(pristine: Path, tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    root = tmp_path / "store"
    shutil.copytree(pristine, root)
    before = content(root)
    victim = sorted((root / "attempts" / "task=faulty").glob("part-*.parquet"))[0]
    _damage(victim, "zero-byte")
    assert victim.name in cli("status", str(root)).stdout
    repaired = cli("compact", str(root), "--repair")
    assert "(0 runs will run again)" in repaired.stdout, repaired.stdout + repaired.stderr
    after = content(root)
    for key in before:
        pd.testing.assert_frame_equal(after[key], before[key], obj=key)
    # the lost attempt was the kept one of its run: compaction restores it to the history from runs/
    assert ResultStore(root).read_attempts("faulty").num_rows == 2
