"""No wait and no fallback is silent (issue 44): a study lease file that does not decode is reported at
once (a ~30 s silent wait before), and workers that cannot stage their curves under the root say that
the driver takes them."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from cluster.reaper import descendants, reap, still_running
from runner import ResultStore
from runner.coord.study_lease import GarbageLeaseWarning, StudyLease
from runner.execute import staging
from runner.execute.staging import StagingFallback, probe_nodes
from runner.fs.exclusive import LocalLink
from runner.fs.root import Root


def test_a_garbage_study_lease_file_is_reported_before_any_wait(tmp_path: Path) -> None:
    seen: list[str] = []

    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

        def sleep(self, s: float) -> None:
            if not seen:
                seen.extend(str(w.message) for w in caught if issubclass(w.category, GarbageLeaseWarning))
                assert seen, "waited before saying why"
            self.now += s

    clock = Clock()
    lease = StudyLease(Root(ResultStore(tmp_path).fs, str(tmp_path)), LocalLink(), "s", "j", 2.0, clock, clock.sleep)
    garbage = tmp_path / lease.folder / "g000000000.json"
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"\x00\xffnot a lease")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lease.acquire(beat=False)
    assert seen and str(garbage) in seen[0] and "2 s" in seen[0]
    assert clock.now >= 2.0  # taken over once its beat stood still for a lease
    lease.release()


def test_a_full_incoming_folder_says_the_driver_takes_the_curves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(staging, "write_bytes", full)
    with pytest.warns(StagingFallback, match="No space left on device.*send their curve rows to the driver"):
        assert probe_nodes([], str(tmp_path), "_store/incoming/s.1.h") == frozenset()


# ---- a SIGKILLed driver leaves no Ray process behind ----------------------------------------------------

DRIVER = """
import sys, time
from cluster import connect
connect(None, num_cpus=1)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.ray
@pytest.mark.faults
def test_a_sigkilled_driver_leaves_no_ray_process_it_started(tmp_path: Path) -> None:
    """DashboardAgent and RuntimeEnvAgent outlived a SIGKILLed driver for good (issue 44)."""
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER], cwd=repo, env=env, stdout=subprocess.PIPE, start_new_session=True
    )
    started: dict[int, str] = {}
    try:
        assert driver.stdout is not None and driver.stdout.readline() == b"ready\n"
        deadline = time.monotonic() + 60
        names: set[str] = set()
        while not {"ray::DashboardAgent", "ray::RuntimeEnvAgent"} <= names:  # the agents start after ray.init
            assert time.monotonic() < deadline, names
            started = descendants(driver.pid)
            names = {_name(p) for p in started}
            time.sleep(0.2)
        assert not _left_after_killing(driver, started)  # the agents survived before
    finally:
        if driver.poll() is None:
            driver.kill()
        reap(started)  # only processes this test's driver started


PARENT = """
import subprocess, sys, time
sys.stdin.readline()
subprocess.Popen(["sleep", "600"])
print("started", flush=True)
time.sleep(600)
"""

WATCHED = f"""
import subprocess, sys
from cluster.reaper import start
early = subprocess.Popen(["sleep", "600"])
parent = subprocess.Popen([sys.executable, "-c", {PARENT!r}], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
start()
print(early.pid, parent.pid, flush=True)
sys.stdin.readline()
parent.stdin.write(b"go\\n"); parent.stdin.flush()
print(parent.stdout.readline().decode().strip(), flush=True)
sys.stdin.readline()
"""


def test_a_driver_killed_the_moment_its_watcher_started_or_a_child_started_one_leaves_nothing() -> None:
    """Killed right after `start` returned, or right after a watched child started a grandchild (both
    before the watcher's next look): the first look is done before `start` returns, and at the end the
    watcher adds what its survivors started since (before, both were left running)."""
    repo = Path(__file__).resolve().parent.parent
    for kill_after_grandchild in (False, True):
        driver = subprocess.Popen(
            [sys.executable, "-c", WATCHED],
            cwd=repo,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        started: dict[int, str] = {}
        try:
            assert driver.stdin is not None and driver.stdout is not None
            early, parent = map(int, driver.stdout.readline().split())
            if kill_after_grandchild:
                driver.stdin.write(b"go\n")
                driver.stdin.flush()
                assert driver.stdout.readline() == b"started\n"
            started = descendants(driver.pid)
            assert {early, parent} <= set(started)
            assert len(started) == 3 + kill_after_grandchild  # the watcher, early, parent (and its sleep)
            assert not _left_after_killing(driver, started), kill_after_grandchild
        finally:
            if driver.poll() is None:
                driver.kill()
            reap(started)


def _left_after_killing(driver: subprocess.Popen[bytes], started: dict[int, str]) -> dict[int, str]:
    """SIGKILL `driver`; which of the processes it `started` (its watcher aside) still run 30 s later."""
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    deadline = time.monotonic() + 30
    while (left := {p: _name(p) for p in still_running(started) if "cluster/reaper.py" not in _name(p)}) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    return left


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
