"""GPU placement when a GPU node goes (issue 27, item 5), on a `ray.cluster_utils.Cluster` of this
machine: a head without GPU (the driver's node, one CPU actor) and two worker nodes that declare one GPU
each (a resource count: torch sees none). `--gpus-per-worker 1` puts one GPU actor on each GPU node; a
GPU node removed mid-grid (its raylet and workers SIGKILLed while its actor runs a chunk) loses the chunk,
and the grid completes on the other GPU node: every run stored once, each row with the device it ran on
(the CPU here: a simulated GPU node). The actors staged their curves under the local root (all nodes
share this machine's disk): nothing of the lost node's is left there either.

On a lent GPU the same placement runs for real in tests/test_gpu_pool.py (CUDA tests); none was lent to
this work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from runner import RayExecutor, ResultStore, run_grid
from runner.store.txn import INCOMING_DIR
from tests.conftest import files_under
from tests.options import opts
from tests.test_cluster_faults import _alive_workers, losing_a_busy_node

pytestmark = [pytest.mark.ray, pytest.mark.faults]

SHAPE = {"d_in": 6, "d_out": 3, "m": 20, "L": 3, "width": 6, "n_iters": 600, "log_every": 50, "algo": "gd"}
N_GPU_CELLS = 16


@pytest.fixture(scope="module")
def two_gpu_nodes() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    from cluster import connect

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    for _ in range(2):
        cluster.add_node(num_cpus=1, num_gpus=1)
    cluster.wait_for_nodes()
    ray = connect(cluster.address)
    yield cluster
    ray.shutdown()  # this process only joined: disconnect, then stop the nodes the fixture started
    cluster.shutdown()


def test_a_lost_gpu_node_s_work_moves_to_the_other_gpu_node(tmp_path: Path, two_gpu_nodes: Any) -> None:
    import ray

    grid = {
        "name": "gpu_node_lost",
        "blocks": [
            {"task": "deep_linear", "params": SHAPE, "product": {"lr": [0.001 * (i + 1) for i in range(N_GPU_CELLS)]}},
            {"task": "faulty", "params": {"sleep_s": 0.05}, "product": {"x": [1.0, 2.0, 3.0, 4.0]}},  # CPU only
        ],
    }
    executor = RayExecutor(address=two_gpu_nodes.address, gpus_per_worker=1.0, batch=False)
    executor.start()
    assert sorted(executor.kinds) == ["cpu", "gpu", "gpu"]
    gpu_nodes = {ray.get(executor.actors[i].placement.remote())[0] for i, k in enumerate(executor.kinds) if k == "gpu"}
    assert len(gpu_nodes) == 2  # one GPU actor on each GPU node
    with losing_a_busy_node(two_gpu_nodes, executor, tmp_path):
        report = run_grid(grid, tmp_path, opts(flush_s=0.3), executor=executor)
    try:
        assert len(_alive_workers(two_gpu_nodes)) == 1  # a GPU node really went while the grid ran
        assert report.counts == {"ok": N_GPU_CELLS + 4}
        assert executor.chunks_resubmitted >= 1
        lost = [i for i in executor.down if executor.kinds[i] == "gpu"]
        assert lost  # the lost node's GPU actor gets no work; the other GPU actor took its chunk
    finally:
        executor.close()
    ids = ds.dataset(tmp_path / "runs", partitioning="hive").to_table(columns=["run_id"])["run_id"].to_pylist()
    assert len(ids) == len(set(ids)) == N_GPU_CELLS + 4
    rows = ResultStore(tmp_path).read_runs("deep_linear", columns=["device", "gpu_name"]).to_pylist()
    assert {(r["device"], r["gpu_name"]) for r in rows} == {("cpu", None)}  # the device it ran on: torch saw no GPU
    assert files_under(tmp_path / INCOMING_DIR) == []
