"""A driver paused past its lease (SIGSTOP, as a suspended laptop or a stopped job is) while another
driver takes over its blocks and finishes the grid: resumed, it asks what is done before it runs one
more cell (before: it ran its claimed wave again, 572 of 600 cells twice)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from runner import ResultStore, run_grid
from runner.coord.liveness import Heartbeat
from tests.options import opts
from tests.shared_drivers import REPO, ledger_grid, read_ledger

pytestmark = pytest.mark.faults


def _stop_outside_the_lock(pid: int, lock: Path) -> None:
    """SIGSTOP `pid` at a moment it does not hold the store's writers' lock (an flock, /proc/locks): a
    process stopped while committing keeps it, and every other writer waits for it (the local lock's one
    limit, docs/reliability.md); the point here is what the stopped driver does once resumed."""
    inode = lock.stat().st_ino
    for _ in range(1000):
        os.kill(pid, signal.SIGSTOP)
        held = [line for line in Path("/proc/locks").read_text().splitlines() if f":{inode} " in line]
        if not any(line.split()[4] == str(pid) for line in held):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError("the driver held the writers' lock at every try")


def test_a_heartbeat_that_lapsed_says_so_once() -> None:
    now = [0.0]
    beat = Heartbeat(lambda: None, period_s=1.0, name="t", clock=lambda: now[0], lapse_s=2.0)
    beat.last_success = 0.0
    now[0] = 1.5
    assert not beat.lapsed()
    now[0] = 2.5  # no good beat for longer than the lapse: as a process resumed from SIGSTOP sees it
    assert beat.lapsed() and not beat.lapsed()  # one answer per lapse
    beat.last_success = 2.6
    now[0] = 3.0
    assert not beat.lapsed()


def test_a_driver_resumed_after_its_blocks_were_taken_runs_none_of_them_again(tmp_path: Path) -> None:
    n, lease = 96, 1.0
    ledger = tmp_path / "ledger"
    grid = ledger_grid(tmp_path / "grid.yaml", n, ledger, sleep_s=0.03)
    root = str(tmp_path / "results")
    cmd = [sys.executable, "-m", "runner.cli", "run", str(grid), "--results", root, "--executor", "local"]
    # The first driver flushes only where a wave ends (a long flush window): stopped mid-wave, it holds no
    # writers' lock (an flock, which a stopped process keeps: the one thing a pause can hold up).
    first = subprocess.Popen(
        [
            *cmd,
            "--no-progress",
            "--no-batch",
            "--lease",
            str(lease),
            "--flush-seconds",
            "600",
            "--flush-every",
            "10000",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while Counter(pid for _, pid in read_ledger(ledger))[first.pid] < 8:
            assert first.poll() is None, first.communicate()[0]
            assert time.monotonic() < deadline, "the first driver computed nothing"
            time.sleep(0.02)
        _stop_outside_the_lock(first.pid, Path(root, "_store", "lock"))
        stopped = Counter(pid for _, pid in read_ledger(ledger))[first.pid]
        # the second driver: the first's beat stays unchanged for a lease, its blocks are taken over
        report = run_grid(str(grid), root, opts(batch=False, flush_s=0.2), lease_s=lease)
        assert report.executed + stopped >= n - 2  # the second did (nearly) all the rest
        os.kill(first.pid, signal.SIGCONT)
        out, _ = first.communicate(timeout=120)
        assert first.returncode == 0, out
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    by_first = Counter(pid for _, pid in read_ledger(ledger))[first.pid]
    computed = Counter(x for x, _ in read_ledger(ledger))
    again = sum(count - 1 for count in computed.values())
    # resumed, the first ran at most the cell under way when it stopped and the one pulled next; the cells
    # it had finished and not committed when it stopped were run again by the second (as a killed one's)
    assert by_first - stopped <= 2, out
    assert again <= stopped + 2 and len(computed) == n
    runs = ResultStore(root).read_runs("faulty", ["status"])
    assert runs.num_rows == n and set(runs["status"].to_pylist()) == {"ok"}
