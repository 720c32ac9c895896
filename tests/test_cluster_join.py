"""Joining a Ray cluster: what the command asks of it is checked against what it has, and the join
itself is bounded and interruptible.

--workers and --threads are checked right after joining, before anything is written: 100,000 workers
took the driver and Ray's GCS past 8 GB each.

The join is bounded and interruptible. Ray 2.60's `ray.init` against an address where no
GCS answers retries for about 14 minutes (20 tries of a GCS client that waits ~40 s each), inside C++
calls that a Python signal handler cannot interrupt, so SIGTERM did nothing. convgrid runs the connect
in a thread of its own and waits for it where signals are handled: past CONVGRID_CONNECT_TIMEOUT_S it
is one message and exit code 3, and SIGTERM meanwhile exits 143 at once. Nothing is written either way."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, files_under

pytestmark = pytest.mark.ray  # imports Ray in the command (starts none)

GRID = "blocks:\n  - task: least_squares\n    params: {n_iters: 20}\n"
STUDY = (
    "task: least_squares\nparams: {n_iters: 20}\nobjective: {metric: err_final}\nn_trials: 2\n"
    "space:\n  lr: {type: float, low: 0.01, high: 0.5}\n"
)


@pytest.fixture(params=["auto", "listener"])
def silent_address(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str]]]:
    """An address with no Ray behind it: `auto` pointed (RAY_ADDRESS) at a loopback port where nothing
    listens, or HOST:PORT of a socket that accepts connections and never speaks (it passes the quick
    TCP probe that `connect` makes first; Ray then tries the host's own address, where nothing is)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if request.param == "auto":
        sock.close()
        yield "auto", {"RAY_ADDRESS": f"127.0.0.1:{port}"}
        return
    sock.listen(16)
    try:
        yield f"127.0.0.1:{port}", {}
    finally:
        sock.close()


def _start(tmp_path: Path, address: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], Path]:
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID)
    results = tmp_path / "results"
    command = [sys.executable, "-m", "runner.cli", "run", str(grid), "--address", address, "--results", str(results)]
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=full_env), results


def test_a_connect_that_gets_no_answer_ends_at_the_timeout(
    tmp_path: Path, silent_address: tuple[str, dict[str, str]]
) -> None:
    address, env = silent_address
    proc, results = _start(tmp_path, address, {**env, "CONVGRID_CONNECT_TIMEOUT_S": "3"})
    _, err = proc.communicate(timeout=240)  # without the bound: ~14 minutes
    assert proc.returncode == 3, err
    (message,) = [line for line in err.splitlines() if line.startswith("convgrid: error:")]  # Ray's C++ logs around it
    assert "within 3 s" in message and "CONVGRID_CONNECT_TIMEOUT_S" in message and address in message
    assert files_under(results) == []


def test_sigterm_ends_a_connect_in_progress(tmp_path: Path, silent_address: tuple[str, dict[str, str]]) -> None:
    address, env = silent_address
    proc, results = _start(tmp_path, address, {**env, "CONVGRID_CONNECT_TIMEOUT_S": "600"})
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # Ray says when it starts to connect
        seen.append(line)
        if "Connecting to existing Ray cluster" in line:
            break
    time.sleep(1.0)  # well inside ray.init, whose GCS client waits seconds per try
    proc.send_signal(signal.SIGTERM)
    # Within seconds: Ray's C++ GCS client held the handler off for ~35 s per try before (a wide margin)
    _, rest = proc.communicate(timeout=20)
    err = "".join(seen) + rest
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped by SIGTERM" in err
    assert files_under(results) == []


def test_workers_and_threads_beyond_a_joined_cluster_are_refused_before_anything_is_written(
    tmp_path: Path, ray_local: object, cli
) -> None:
    import ray

    address = ray.get_runtime_context().gcs_address  # the module's Ray: 2 CPUs on one node
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID)
    results = tmp_path / "results"
    workers = cli("run", str(grid), "--address", address, "--results", str(results), "--workers", "3")
    assert workers.returncode == 2, workers.stderr
    assert "key '--workers'" in workers.stderr and f"the cluster at {address} has 2 CPUs" in workers.stderr
    assert "valid: 1 to 2" in workers.stderr and "CONVGRID_MAX_WORKERS" in workers.stderr
    study = tmp_path / "s.yaml"
    study.write_text(STUDY)
    threads = cli("tune", str(study), "--address", address, "--results", str(results), "--threads", "3")
    assert threads.returncode == 2 and "the largest node of the cluster" in threads.stderr, threads.stderr
    assert "valid: 1 to 2" in threads.stderr
    assert files_under(results) == []
