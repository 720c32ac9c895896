"""Crash safety of the store with real SIGKILLs: `convgrid compact` killed at every phase of its
transaction leaves convgrid's readers seeing exactly the same content and the next command (any
command) finishes the job; compact racing a live driver loses and doubles nothing; a driver killed in
the middle of a flush leaves nothing half-visible."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path, PurePosixPath

import pandas as pd
import pyarrow as pa
import pytest
import yaml

from runner import ResultStore, run_grid
from runner.store import txn as txn_module
from runner.store.trials import read_trials
from runner.store.txn import PHASES, STAGING_DIR, TXN_DIR, Transaction
from tests.conftest import REPO, CliResult, done_ids, run_cell_by_cell
from tests.options import opts

pytestmark = pytest.mark.faults

GRID = {
    "name": "faults",
    "blocks": [
        {"task": "least_squares", "params": {"d_in": 6, "m": 20, "n_iters": 30}, "product": {"lr": [0.01, 0.02, 9.0]}},
        {"task": "faulty", "product": {"x": [1.0, 2.0, 3.0, 4.0]}},
        {"task": "faulty", "params": {"x": 5.0, "fail": True}},
    ],
}


def _cli(*args: str, kill_at: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`convgrid ARGS` in a process of its own; with `kill_at`, SIGKILLed at that phase (tests/kill_at.py)."""
    entry = ["-m", "runner.cli"] if kill_at is None else ["-m", "tests.kill_at", kill_at]
    return subprocess.run([sys.executable, *entry, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def logical(root: Path) -> dict[str, pd.DataFrame]:
    """Everything convgrid's readers see, in a canonical order (no recovery: a pure read)."""
    store = ResultStore(root)
    seen: dict[str, pd.DataFrame] = {}
    for task in store.tasks():
        seen[f"runs/{task}"] = store.read_runs(task).to_pandas().sort_values("run_id").reset_index(drop=True)
        curves = store.read_curves(task).to_pandas()
        seen[f"curves/{task}"] = curves.sort_values(["run_id", "step"]).reset_index(drop=True)
        attempts = store.read_attempts(task).to_pandas()
        seen[f"attempts/{task}"] = attempts.sort_values(["run_id", "batch_id"]).reset_index(drop=True)
    members = store.read_members().to_pandas().drop_duplicates(["grid", "run_id"])
    seen["members"] = members.sort_values(["grid", "run_id"]).reset_index(drop=True)
    seen["trials"] = read_trials(store).to_pandas()
    return seen


def assert_same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        pd.testing.assert_frame_equal(a[key], b[key], check_like=True, obj=key)


def settled(root: Path) -> None:
    """What a plain client needs: no transaction left over, runs/ one row per run, curves kept only."""
    assert not list((root / TXN_DIR).glob("*")) and not list((root / STAGING_DIR).glob("*"))
    store = ResultStore(root)
    for task in store.tasks():
        raw = pd.read_parquet(root / "runs" / f"task={task}")
        assert not raw["run_id"].duplicated().any()
        assert len(raw) == store.read_runs(task).num_rows
        raw_curves = pd.read_parquet(root / "curves" / f"task={task}")
        assert len(raw_curves) == store.read_curves(task).num_rows


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of many small parts with reruns: what compact has real work on."""
    root = tmp_path_factory.mktemp("messy")
    # unbatched: one record per executor yield, so flush_every=1 makes many parts (a batch arrives at once)
    one_by_one = opts(flush_every=1, batch=False)
    run_cell_by_cell(GRID, root, one_by_one)  # a part per run, whatever the timing
    run_grid(GRID, root, one_by_one, retry_failed=True)
    store = ResultStore(root)
    run_grid(GRID, root, one_by_one, only=sorted(done_ids(store, "least_squares"))[:2])
    assert len(list((root / "runs").rglob("*.parquet"))) > 2
    return root


@pytest.mark.parametrize("phase", PHASES)
def test_compact_killed_at_every_phase_changes_nothing_readers_see(
    messy: Path, tmp_path: Path, phase: str, cli: Callable[..., CliResult]
) -> None:
    root = tmp_path / "store"
    shutil.copytree(messy, root)
    before = logical(root)
    killed = _cli("compact", str(root), kill_at=phase)
    assert killed.returncode == -9, killed.stderr  # it really died there, by SIGKILL
    assert_same(logical(root), before)  # convgrid's readers, before anyone recovers
    # the next command of any kind (here: status) finishes or undoes the compaction
    status = cli("status", str(root))
    assert status.returncode == 0, status.stderr
    settled(root)
    assert_same(logical(root), before)
    done = cli("compact", str(root))
    assert done.returncode == 0, done.stderr
    settled(root)
    assert_same(logical(root), before)
    assert len(list((root / "runs" / "task=faulty").glob("*.parquet"))) == 1


@pytest.mark.parametrize("phase", ["staging", "marked", "publishing", "published", "deleted"])
def test_driver_killed_mid_flush_leaves_all_or_nothing(
    tmp_path: Path, phase: str, cli: Callable[..., CliResult]
) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    root = tmp_path / "results"
    one_flush = ("--flush-every", "100", "--flush-seconds", "600")  # all 8 runs in one transaction
    args = ("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress", *one_flush)
    killed = _cli(*args, kill_at=f"flush:{phase}")
    assert killed.returncode == -9, killed.stderr
    seen = logical(root)
    committed = phase != "staging"  # the marker is the commit point
    runs = sum(len(v) for k, v in seen.items() if k.startswith("runs/"))
    assert runs == (8 if committed else 0)  # the whole flush or nothing
    again = cli("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress")
    assert again.returncode == 1, again.stderr  # the grid holds its failing cell: exit 1 (test_cli_conventions)
    assert ("nothing to run" in again.stdout) == committed
    settled(root)
    store = ResultStore(root)
    assert store.read_runs("faulty").num_rows == 5 and store.read_runs("least_squares").num_rows == 3
    assert store.read_attempts("faulty").num_rows == 5  # nothing ran twice
    assert store.read_curves("least_squares").num_rows == 90


def test_compact_racing_a_live_driver_loses_and_doubles_nothing(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    # 300 runs of 20 ms: at least 6 s of a live driver whatever the load (sleeping is not slowed by
    # it), against ~1-3 s per compact process: the race is certain, not a matter of timing
    n = 300
    grid = tmp_path / "grid.yaml"
    spec = {
        "name": "race",
        "blocks": [{"task": "faulty", "params": {"sleep_s": 0.02}, "product": {"x": list(range(n))}}],
    }
    grid.write_text(yaml.safe_dump(spec))
    root = tmp_path / "results"
    cmd = [sys.executable, "-m", "runner.cli", "run", str(grid), "--results", str(root), "--executor", "local"]
    driver = subprocess.Popen([*cmd, "--no-progress", "--flush-every", "1"], cwd=REPO, stderr=subprocess.PIPE)
    compactions = 0
    deadline = time.monotonic() + 120
    while driver.poll() is None and time.monotonic() < deadline and compactions < 3:
        if (root / "runs").exists():
            done = _cli("compact", str(root))
            assert done.returncode == 0, done.stderr
            compactions += 1
    assert driver.wait(timeout=60) == 0, driver.stderr.read() if driver.stderr else ""
    assert compactions >= 2
    store = ResultStore(root)
    assert len(done_ids(store)) == n
    assert store.read_curves("faulty").num_rows == n  # every run kept its curve
    assert store.read_attempts("faulty").num_rows == n  # and ran once
    settled(root)
    again = cli("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress")
    assert "nothing to run" in again.stdout


@pytest.mark.parametrize("phase", ["published", "deleting"])
def test_retry_killed_while_replacing_the_old_attempt(
    messy: Path, tmp_path: Path, phase: str, cli: Callable[..., CliResult]
) -> None:
    """A --retry-failed flush rewrites the part holding the failed attempt: killed between publishing
    the new part and deleting the old one, readers still see one row per run, the new attempt."""
    root = tmp_path / "store"
    shutil.copytree(messy, root)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    args = ("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress", "--retry-failed")
    killed = _cli(*args, kill_at=f"flush:{phase}")
    assert killed.returncode == -9, killed.stderr
    store = ResultStore(root)
    attempts = store.read_attempts("faulty").to_pandas()
    failed = attempts[attempts["status"] == "failed"]
    assert len(failed) == 3 and failed["run_id"].nunique() == 1  # the third attempt is committed
    runs = store.read_runs("faulty").to_pandas()
    assert len(runs) == 5
    assert runs.loc[runs["run_id"] == failed["run_id"].iloc[0], "batch_id"].item() == failed["batch_id"].iloc[-1]
    assert cli("status", str(root)).returncode == 0
    settled(root)


def test_a_marker_that_outlived_its_staged_parts_is_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staging and marker folders are fsynced together: a power cut between can keep the marker
    and lose a staged part's name. Nothing was published then, so recovery undoes the transaction:
    the part it would have replaced stays, its other staged part goes, readers see the old state."""
    store = ResultStore(tmp_path)
    store.write_part(pa.table({"x": [1, 2]}), "members")
    before = store.parts("members")
    txn = Transaction(store.files)
    first = txn.add(pa.table({"x": [3]}), "members")
    txn.add(pa.table({"x": [4]}), "members")
    txn.remove(before[0])
    monkeypatch.setattr(txn_module, "apply", lambda *args, **kwargs: None)  # the power cut: nothing published
    txn.commit()
    monkeypatch.undo()
    assert store.parts("members") != before  # committed, as far as readers could tell
    (tmp_path / STAGING_DIR / f"{txn.marker.txn}.{PurePosixPath(first).name}").unlink()  # its name was lost
    assert store.recover() == 1
    assert store.parts("members") == before
    assert not list((tmp_path / TXN_DIR).iterdir()) and not list((tmp_path / STAGING_DIR).iterdir())
