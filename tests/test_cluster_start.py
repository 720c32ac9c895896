"""The cluster path of cluster/README.md, as a user runs it: a head started with `ray start --head`
and a second node with `ray start --address`, token authentication on, a grid and a study run with
`--address`; the embedded default beside that head; a head lost mid-grid and a new cluster resuming.

Everything is on loopback (see tests/cluster_procs.py) and every process started here is stopped by
its process id. One cluster serves the module; the head-lost test, last, replaces its head.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import yaml

from runner.store import ResultStore
from runner.store.trials import read_trials
from tests.cluster_procs import HandCluster, free_port
from tests.conftest import REPO
from tests.faulty_inputs import faulty_study

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def hand_cluster() -> Iterator[HandCluster]:
    cluster = HandCluster.create()
    try:
        cluster.start_head()
        cluster.add_worker_node()
        yield cluster
    finally:
        cluster.destroy()


def _grid(tmp: Path, n: int, sleep_s: float, name: str) -> Path:
    path = tmp / f"{name}.yaml"
    block = {"task": "faulty", "params": {"sleep_s": sleep_s}, "product": {"x": [float(i) for i in range(n)]}}
    path.write_text(yaml.safe_dump({"name": name, "blocks": [block]}))
    return path


def _driver_losing_nodes(
    args: list[str], env: dict[str, str], cluster: HandCluster, results: Path, lost: list[subprocess.Popen[bytes]]
) -> tuple[int, str, str]:
    """A driver running `args` on `cluster`, whose nodes `lost` are stopped once it has stored a first part
    (a condition, not a time: the rest of its work is in flight then); its exit code and output."""
    driver = subprocess.Popen(
        [sys.executable, "-m", "runner.cli", *args, "--address", cluster.address],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while not list((results / "runs").rglob("part-*.parquet")):
            assert driver.poll() is None, driver.communicate()
            time.sleep(0.2)
        for node in lost:
            cluster.stop_node(node)
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    return driver.returncode, out, err


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def _stored_ids(root: Path) -> list[str]:
    """Every physical runs row (not the newest-per-run view): a run written twice shows twice."""
    return ds.dataset(root / "runs", partitioning="hive").to_table(columns=["run_id"])["run_id"].to_pylist()


def test_grid_and_study_on_a_hand_started_two_node_cluster_with_token_auth(
    tmp_path: Path, hand_cluster: HandCluster
) -> None:
    assert hand_cluster.alive_nodes() == 2
    # The driver gets only RAY_AUTH_TOKEN_PATH, as the docs say; convgrid turns token mode on.
    env = hand_cluster.driver_env(token=True)
    results = tmp_path / "results"
    grid = _grid(tmp_path, 8, 0.05, "two_nodes")
    run = _cli(env, "run", str(grid), "--address", hand_cluster.address, "--results", str(results), "--no-progress")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "two_nodes: ran 8 of 8 cells" in run.stdout
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(faulty_study("hand_study", 6, 2, sampler={"name": "random", "seed": 0})))
    tune = _cli(env, "tune", str(study), "--address", hand_cluster.address, "--results", str(results), "--no-progress")
    assert tune.returncode == 0, tune.stdout + tune.stderr
    trials = read_trials(ResultStore(results), "hand_study").to_pylist()
    assert [t["state"] for t in trials] == ["COMPLETE"] * 6
    runs = ResultStore(results).read_runs("faulty", columns=["status"]).to_pylist()
    assert len(runs) == 8 + 6 and {r["status"] for r in runs} == {"ok"}


def test_a_driver_without_the_token_is_told_what_to_do(tmp_path: Path, hand_cluster: HandCluster) -> None:
    grid = _grid(tmp_path, 2, 0.0, "no_token")
    # Ray retries a GCS that refuses it once a second, 20 times by default; 3 tries show the same refusal.
    env = {**hand_cluster.driver_env(token=False), "RAY_gcs_server_port_wait_time_s": "3"}
    proc = _cli(env, "run", str(grid), "--address", hand_cluster.address, "--results", str(tmp_path / "r"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "convgrid: error: cannot join a Ray cluster at" in proc.stderr and "RAY_AUTH_TOKEN_PATH" in proc.stderr
    assert not (tmp_path / "r" / "runs").exists()


def test_an_unreachable_address_is_one_message(tmp_path: Path) -> None:
    grid = _grid(tmp_path, 2, 0.0, "nobody")
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    proc = _cli(dict(os.environ), "run", str(grid), "--address", address, "--results", str(tmp_path))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    assert f"convgrid: error: no Ray cluster answers at {address}" in proc.stderr


EMBEDDED = """
import json, sys
import ray as plain
from cluster import connect, shutdown_if_owned

ray = connect(None, num_cpus=1)
mine = ray.get_runtime_context().gcs_address
from runner import run_grid
from runner import ExecutionOptions
report = run_grid(sys.argv[1], sys.argv[2], ExecutionOptions(executor="ray", progress=False))
shutdown_if_owned()
plain.init(logging_level="ERROR")  # what the embedded default must not do: join the latest cluster
joined = plain.get_runtime_context().gcs_address
print(json.dumps({"embedded": mine, "plain": joined, "line": report.line()}))
"""


def test_the_embedded_default_starts_its_own_ray_beside_a_running_head(
    tmp_path: Path, hand_cluster: HandCluster
) -> None:
    import json

    grid = _grid(tmp_path, 3, 0.0, "beside")
    # RAY_TMPDIR is where the head wrote ray_current_cluster: a plain ray.init() here finds the head.
    env = hand_cluster.driver_env(token=True)
    proc = subprocess.run(
        [sys.executable, "-c", EMBEDDED, str(grid), str(tmp_path / "r")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["plain"] == hand_cluster.address  # the head is really there to be joined
    assert out["embedded"] != hand_cluster.address  # ... and the embedded default did not join it
    assert out["line"].startswith("beside: ran 3 of 3 cells")


def test_head_lost_mid_grid_exits_with_a_message_and_a_new_cluster_resumes(
    tmp_path: Path, hand_cluster: HandCluster
) -> None:
    n = 60
    # 60 x 0.5 s on two 1-CPU nodes: ~15 s of work. The first part is stored about 2 s in (flush_s); the
    # surviving worker node goes on for the ~4 s the driver takes to call the head lost, so most of the
    # work is still left then (with 0.25 s cells a clean-clone CI run once finished every cell on the
    # worker node first), and the new 2-CPU head does the rest.
    grid = _grid(tmp_path, n, 0.5, "head_lost")
    results = tmp_path / "results"
    env = {**hand_cluster.driver_env(token=True), "CONVGRID_HEAD_GRACE_S": "3"}
    args = ["run", str(grid), "--results", str(results), "--no-progress"]
    head, *workers = hand_cluster.nodes
    # Lose the head once some work is stored (a condition, not a time): the rest is in flight.
    code, out, err = _driver_losing_nodes(args, env, hand_cluster, results, [head])
    assert code == 3, out + err
    assert "Traceback" not in err
    assert "convgrid: error: lost the Ray head at" in err and "rerun the same command" in err
    before = _stored_ids(results)
    assert 1 <= len(before) < n and len(before) == len(set(before))

    # A new cluster (what the orphaned worker node would do on its own after a minute, done now).
    for node in workers:
        hand_cluster.stop_node(node)
    hand_cluster.nodes.clear()
    hand_cluster.port = free_port()
    hand_cluster.start_head(num_cpus=2)  # the work left runs on both cores
    again = _cli(env, *args, "--address", hand_cluster.address)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"ran {n - len(before)} of {n} cells" in again.stdout
    assert f"{len(before)} were already done" in again.stdout
    after = _stored_ids(results)
    assert len(after) == len(set(after)) == n  # every run stored exactly once


def test_head_lost_mid_study_exits_with_a_message_and_a_new_cluster_resumes(
    tmp_path: Path, hand_cluster: HandCluster
) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(
        yaml.safe_dump(faulty_study("head_lost_study", 16, 2, sleep_s=0.5, sampler={"name": "random", "seed": 5}))
    )
    results = tmp_path / "results"
    env = {**hand_cluster.driver_env(token=True), "CONVGRID_HEAD_GRACE_S": "3"}
    args = ["tune", str(study), "--results", str(results), "--no-progress"]
    if hand_cluster.alive_nodes() == 0:  # the grid test above failed before its new head: not this test's fault
        hand_cluster.stop()
        hand_cluster.port = free_port()
        hand_cluster.start_head(num_cpus=2)
    # Every node lost once a first batch is told and stored.
    code, out, err = _driver_losing_nodes(args, env, hand_cluster, results, list(hand_cluster.nodes))
    assert code == 3, out + err
    assert "Traceback" not in err and "convgrid: error: lost the Ray head at" in err
    hand_cluster.nodes.clear()
    hand_cluster.port = free_port()
    hand_cluster.start_head(num_cpus=2)  # the work left runs on both cores
    again = _cli(env, *args, "--address", hand_cluster.address)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = read_trials(ResultStore(results), "head_lost_study").to_pylist()
    assert sum(t["state"] == "COMPLETE" for t in trials) == 16  # trials left RUNNING were failed and asked again
    ids = _stored_ids(results)
    assert len(ids) == len(set(ids))
