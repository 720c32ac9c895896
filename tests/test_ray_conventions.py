"""Conventions on Ray: actors named after the grid they run (what Ray's dashboard shows), runs recording
the driver's code version without a `git` per actor, and an embedded start that prints no notice."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner import run_grid
from runner.execute import provenance
from runner.store import ResultStore
from tests.conftest import REPO
from tests.options import opts

GRID = {
    "name": "named_grid",
    "blocks": [{"task": "least_squares", "params": {"n_iters": 20}, "product": {"seed": [0, 1, 2, 3]}}],
}


def actor_reprs(ray: Any) -> set[str]:
    """The repr of every actor this Ray instance has held, as its GCS stores it: what the dashboard shows
    in the actors table ("Repr") and names actor calls after. The state API that returns it to users
    (ray.util.state.list_actors) goes through the dashboard, which the embedded Ray does not start, so
    this reads the GCS table the dashboard reads."""
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    accessor = state._connect_and_get_accessor()
    rows = [gcs_pb2.ActorTableData.FromString(row) for row in accessor.get_actor_table(None, None)]
    return {row.repr_name for row in rows if row.class_name == "_ChunkActor"}


@pytest.mark.ray
def test_actors_are_named_after_their_grid_and_runs_carry_the_drivers_code_version(
    tmp_path: Path, ray_local: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A code version no actor could find on its own: the runs can only have it from the driver.
    sentinel = provenance.CodeVersion("9.9.9", "0123456789ab", True, "the driver")
    monkeypatch.setattr(provenance, "own_code_version", lambda: sentinel)
    report = run_grid(GRID, tmp_path, opts("ray", workers=2))
    assert report.executor == "ray" and report.counts == {"ok": 4}
    rows = ResultStore(tmp_path).read_runs("least_squares", columns=["code_version"]).to_pylist()
    assert {r["code_version"] for r in rows} == {"9.9.9+g0123456789ab.dirty"}
    # Ray records an actor's repr once its creation task has answered; the runs above came after that.
    deadline = time.monotonic() + 30
    while not {"convgrid named_grid #0 cpu", "convgrid named_grid #1 cpu"} <= actor_reprs(ray_local):
        assert time.monotonic() < deadline, actor_reprs(ray_local)
        time.sleep(0.2)


@pytest.mark.ray
def test_an_embedded_start_prints_no_auth_notice_and_keeps_token_auth() -> None:
    """The process is the point: Ray decides on auth, and prints its notice, at a process's first start.
    Its stop too: the monitor (which sits out shutdown's SIGTERM) is killed before ray.shutdown starts, and
    nothing of the embedded Ray outlives the stop."""
    script = (
        "from cluster import connect, shutdown_if_owned\n"
        "ray = connect(None, num_cpus=1)\n"
        "from ray._raylet import AuthenticationMode, get_authentication_mode\n"
        "print(get_authentication_mode() == AuthenticationMode.TOKEN, ray.get(ray.put(7)))\n"
        "import psutil\n"
        "from cluster.connect import ray_monitors\n"
        # the embedded Ray's head processes (not convgrid's own reaper, which lives as long as the driver)
        "procs = [p for p in psutil.Process().children() if '/ray/' in ' '.join(p.cmdline())]\n"
        "(monitor,) = ray_monitors()\n"  # found by its command line: fails here if Ray moves its script
        "real = ray.shutdown\n"
        "def shutdown(*a, **k):\n"
        "    print(not monitor.is_running(), sum(p.is_running() for p in procs) > 0)\n"
        "    real(*a, **k)\n"
        "ray.shutdown = shutdown\n"
        "shutdown_if_owned()\n"
        "print(not any(p.is_running() for p in procs))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    # token auth on, and the driver is let in; at ray.shutdown the monitor is gone and the rest still up;
    # after it, every process of the embedded Ray has exited
    assert done.stdout.split() == ["True", "7", "True", "True", "True"]
    assert "Token authentication" not in done.stderr, done.stderr
