"""SIGTERM (what schedulers and `kill` send) and SIGHUP behave like Ctrl-C: the driver flushes what
finished, stops its workers and exits 128 + the signal, with a message instead of Ray's abort (134)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.faults


def _stored(root: Path) -> list[str]:
    if not (root / "runs").exists():
        return []
    return ds.dataset(root / "runs", partitioning="hive").to_table(columns=["run_id"])["run_id"].to_pylist()


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_signal_flushes_finished_runs_and_exits_cleanly(tmp_path: Path, signum: int, code: int) -> None:
    grid = tmp_path / "g.yaml"
    probe = tmp_path / "finished"
    probe.mkdir()
    params = {"sleep_s": 0.3, "probe_dir": str(probe)}
    # 24 cells of 0.3 s on 2 workers: ~3.6 s of work, the signal comes after 6 (the rerun's share is CI time)
    blocks = [{"task": "faulty", "params": params, "product": {"x": [float(i) for i in range(24)]}}]
    grid.write_text(yaml.safe_dump({"name": "signalled", "blocks": blocks}))
    root = tmp_path / "results"
    # A long flush window: whatever is stored after the signal was flushed by the signal's unwinding.
    cmd = [sys.executable, "-m", "runner.cli", "run", str(grid), "--results", str(root), "--no-progress"]
    proc = subprocess.Popen(
        [*cmd, "--workers", "2", "--flush-seconds", "3600"], cwd=REPO, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline and len(list(probe.iterdir())) < 6:
        time.sleep(0.05)  # until some runs have finished, so that there is something to flush
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert f"stopped by {signal.Signals(signum).name}" in err and "Traceback" not in err
    ids = _stored(root)
    assert len(ids) == len(set(ids))
    assert ids, "nothing that finished before the signal was stored"
    assert len(ids) <= len(list(probe.iterdir()))  # nothing stored that did not finish
    if signum != signal.SIGTERM:
        return  # how the signal unwinds is checked; the resume after it is the same for both (CI time)
    rerun = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{len(set(ids))} were already done" in rerun.stdout
    final = _stored(root)
    assert len(set(final)) == 24 and len(final) == len(set(final))


def test_the_handler_disarms_the_abort_timer_ray_arms_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's C++ failure-signal handler arms alarm(3), then hands SIGTERM on (ray-project/ray#64830): a
    flush and a workers' stop slower than that died with SIGABRT in CI. The command line's handler
    disarms the timer before it unwinds."""
    from runner import errors

    monkeypatch.setattr(errors, "received", [])
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        signal.alarm(30)
        with pytest.raises(errors.Terminated):
            errors.raise_terminated(signal.SIGTERM, None)
        assert signal.alarm(0) == 0  # nothing was left pending
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


SIGTERM_AFTER_A_BACKGROUND_START = """
import os, signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
from cluster.background import BackgroundStart
from cluster.connect import shutdown_if_owned
start = BackgroundStart()
start.wait()
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(4)  # past the 3 s after which Ray's handler, were it still in front, would abort
print("got", got, flush=True)
shutdown_if_owned()
"""


def test_after_a_start_in_a_thread_sigterm_reaches_the_command_line_s_handler_alone() -> None:
    """ray.init in a thread cannot restore the main thread's handlers; once the start is waited for,
    they are put back, so Ray's handler (which logs and arms an abort) no longer sees SIGTERM."""
    proc = subprocess.run(
        [sys.executable, "-c", SIGTERM_AFTER_A_BACKGROUND_START], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "got [15]" in proc.stdout and "SIGTERM received" not in proc.stderr
