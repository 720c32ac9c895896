"""Fault handling with real processes on an embedded Ray (loopback): a worker SIGKILLed mid-chunk,
a run that ignores its deadline, a driver SIGKILLed mid-grid, two drivers on one root."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from runner import RayExecutor, ResultStore, run_grid
from runner.store.compact import compact
from tests.conftest import REPO, convgrid, done_ids
from tests.options import opts

pytestmark = [pytest.mark.ray, pytest.mark.faults]


def _sleepy_grid(n: int, sleep_s: float, name: str = "sleepy") -> dict:
    return {
        "name": name,
        "blocks": [{"task": "faulty", "params": {"sleep_s": sleep_s}, "product": {"x": [float(i) for i in range(n)]}}],
    }


def _parts(root: Path) -> list[Path]:
    return list((root / "runs").rglob("part-*.parquet"))


def _physical_ids(root: Path) -> list[str]:
    return ds.dataset(root / "runs", partitioning="hive").to_table(columns=["run_id"])["run_id"].to_pylist()


def test_worker_sigkilled_mid_chunk_loses_and_doubles_nothing(tmp_path: Path, ray_local: object) -> None:
    executor = RayExecutor(workers=2, target_chunk_s=1.0)
    victim = executor.worker_pids()[0]
    killer = threading.Timer(0.8, os.kill, (victim, signal.SIGKILL))
    killer.start()
    try:
        report = run_grid(_sleepy_grid(40, 0.1), tmp_path, opts(), executor=executor)
    finally:
        killer.cancel()
    assert executor.chunks_resubmitted >= 1  # a chunk really was lost with the worker
    assert report.counts == {"ok": 40}
    ids = _physical_ids(tmp_path)
    assert len(ids) == len(set(ids)) == 40


def test_hard_timeout_kills_a_run_that_ignores_its_deadline(tmp_path: Path, ray_local: object) -> None:
    grid = {
        "name": "hang",
        "blocks": [
            {"task": "faulty", "params": {"hang_s": 60.0}},
            {"task": "faulty", "product": {"x": [1.0, 2.0, 3.0, 4.0]}},
        ],
    }
    executor = RayExecutor(workers=2, timeout_s=0.5, grace_s=1.0)
    report = run_grid(grid, tmp_path, opts(), executor=executor)
    # Had the hard timeout failed, the hanging run would have finished "ok" after 60 s.
    assert report.counts == {"ok": 4, "timeout": 1}
    assert executor.hard_kills == 1
    runs = ResultStore(tmp_path).read_runs("faulty").to_pandas()
    err = runs.loc[runs["status"] == "timeout", "error"].iloc[0]
    assert "hard timeout" in err and "0.5s deadline" in err
    assert len(_physical_ids(tmp_path)) == 5


def _driver(grid: Path, root: Path, *extra: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "runner.cli", "run", str(grid), "--results", str(root), "--no-progress", *extra]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_driver_sigkilled_mid_grid_resumes_with_only_missing_cells(tmp_path: Path, ray_local: object) -> None:
    import yaml

    probe = tmp_path / "finished"
    probe.mkdir()
    spec = _sleepy_grid(100, 0.05, "killed")
    spec["blocks"][0]["params"]["probe_dir"] = str(probe)
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(spec))
    root = tmp_path / "results"
    address = ray_local.get_runtime_context().gcs_address
    # The Ray executor (drivers joined to the module's Ray), small flushes so that a kill during a part
    # write is likely; several kills at different moments, each once this driver has stored something.
    for delay in (0.0, 0.3):
        stored = len(_parts(root))
        proc = _driver(grid, root, "--address", address, "--workers", "2", "--flush-every", "1")
        deadline = time.monotonic() + 120
        while len(_parts(root)) <= stored and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        ids = _physical_ids(root) if (root / "runs").exists() else []
        assert len(ids) == len(set(ids))  # readable, every visible part complete, nothing twice
        finished = {float(p.name) for p in probe.iterdir()}
        stored_x = set(ResultStore(root).read_runs("faulty", columns=["x"])["x"].to_pylist())
        assert stored_x <= finished  # nothing stored that the probe did not see finish
    # A kill after a flush's commit point and before its parts were moved into place leaves them for the
    # next command's recovery to publish: count the runs as that command will see them.
    ResultStore(root).recover()
    before = len(set(_physical_ids(root)))
    assert 0 < before < 100
    final = convgrid("run", str(grid), "--results", str(root), "--address", address, "--no-progress")
    assert final.returncode == 0, final.stderr
    assert f"ran {100 - before} of 100 cells" in final.stdout
    ids = _physical_ids(root)
    assert len(ids) == len(set(ids)) == 100


def test_two_drivers_on_one_root(tmp_path: Path) -> None:
    import yaml

    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump(_sleepy_grid(40, 0.01, "both")))
    root = tmp_path / "results"
    procs = [_driver(grid, root, "--executor", "local", "--flush-every", "5") for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    store = ResultStore(root)
    assert store.read_runs("faulty").num_rows == 40
    assert len(done_ids(store)) == 40
    compact(store)
    ids = _physical_ids(root)
    assert len(ids) == len(set(ids)) == 40
    assert store.read_curves("faulty").num_rows == 40
