"""Soak (issue 44): four drivers on one grid on the loopback object store (moto), one of them stopped
with SIGSTOP in the middle of a commit (its lease checked, its commit point not reached) for well past
its lease, then resumed with SIGCONT. The others take the writers' lock and the stopped one's blocks
over; the resumed one's commit is refused by the fence and its flush is built again on what they
committed. Every cell is stored exactly once: one runs row each, no attempt and no curve row twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from runner import ResultStore
from tests.shared_drivers import REPO, ledger_grid, read_ledger
from tests.test_object_store import s3_root  # noqa: F401 - the loopback S3 server fixture

pytestmark = [pytest.mark.soak, pytest.mark.services, pytest.mark.faults]

N, LEASE_S = 96, 2.0


def test_four_drivers_one_paused_mid_commit_store_every_run_once(s3_root: str, tmp_path: Path) -> None:  # noqa: F811
    root = s3_root.replace("convgrid/results", "convgrid/soak")
    ledger, witness, conflicts = tmp_path / "ledger", tmp_path / "paused", tmp_path / "conflicts"
    grid = ledger_grid(tmp_path / "grid.yaml", N, ledger, sleep_s=0.03)
    args = ["run", str(grid), "--results", root, "--executor", "local", "--no-progress", "--no-batch"]
    args += ["--lease", str(LEASE_S), "--flush-seconds", "0.3"]
    env = {**os.environ, "CONVGRID_LOCK_LEASE_S": str(LEASE_S)}
    started = time.monotonic()
    logs = [tmp_path / f"driver{i}.log" for i in range(4)]  # what each printed, kept if it hangs
    commands = [[sys.executable, "-m", "tests.pause_at", "3", str(witness), str(conflicts), *args]]
    commands += [[sys.executable, "-m", "runner.cli", *args]] * 3
    drivers = [
        subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        for cmd, log in zip(commands, logs, strict=True)
    ]
    paused = drivers[0]
    try:
        deadline = time.monotonic() + 240
        while not witness.exists():
            assert paused.poll() is None, logs[0].read_text()[-3000:]
            assert time.monotonic() < deadline, "the paused driver never reached its third commit"
            time.sleep(0.05)
        stopped_at = time.monotonic()
        stored_before = _stored(root)
        while time.monotonic() - stopped_at < 3 * LEASE_S or _stored(root) <= stored_before:
            assert time.monotonic() < deadline, "no driver committed while one was stopped in its commit"
            time.sleep(0.2)  # the others commit meanwhile: the stopped one's lease and blocks pass on
        paused_s = time.monotonic() - stopped_at
        os.kill(paused.pid, signal.SIGCONT)
        for driver, log in zip(drivers, logs, strict=True):
            try:
                driver.wait(timeout=max(1.0, deadline + 300 - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"driver {driver.pid} never ended: {log.read_text()[-3000:]}") from None
            assert driver.returncode == 0, log.read_text()[-3000:]
    finally:
        for driver in drivers:
            if driver.poll() is None:
                os.kill(driver.pid, signal.SIGCONT)
                driver.kill()
                driver.wait()
    wall_s = time.monotonic() - started
    store = ResultStore(root)
    runs = store.read_runs("faulty", columns=["run_id", "x", "status", "curve_rows"])
    attempts = store.read_attempts("faulty", ["run_id", "batch_id"])
    curves = store.read_curves("faulty", columns=["run_id", "step"])
    assert runs.num_rows == N and len(set(runs["run_id"].to_pylist())) == N
    assert sorted(runs["x"].to_pylist()) == [float(i) for i in range(N)] and set(runs["status"].to_pylist()) == {"ok"}
    pairs = Counter(zip(attempts["run_id"].to_pylist(), attempts["batch_id"].to_pylist(), strict=True))
    assert max(pairs.values()) == 1  # no transaction committed twice
    steps = Counter(zip(curves["run_id"].to_pylist(), curves["step"].to_pylist(), strict=True))
    assert max(steps.values()) == 1 and curves.num_rows == sum(runs["curve_rows"].to_pylist())
    computed = Counter(x for x, _ in read_ledger(ledger))
    refused = conflicts.read_text().splitlines() if conflicts.exists() else []
    print(
        f"\nsoak: {N} cells, 4 drivers, one stopped {paused_s:.1f} s mid-commit (lock lease {LEASE_S:g} s); "
        f"{wall_s:.1f} s; runs stored {runs.num_rows}, attempts {attempts.num_rows}, computed "
        f"{sum(computed.values())} ({sum(1 for c in computed.values() if c > 1)} cells twice); "
        f"commits refused by the fence: {len(refused)}"
    )
    assert refused and all(line.startswith(f"{paused.pid} ") for line in refused)  # the resumed one, only


def _stored(root: str) -> int:
    try:
        return ResultStore(root).read_runs("faulty", columns=["run_id"]).num_rows
    except (OSError, ValueError):
        return 0
