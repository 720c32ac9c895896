"""GPU placement and batching on Ray: a two-node cluster on this machine (ray.cluster_utils.Cluster, loopback)
whose head has no GPU and whose worker node declares one (a resource count, no real GPU). GPU actors
(--gpus-per-worker) land on that node and only there; the tasks that compute on ctx.device go to them,
the others to CPU actors; the stored results equal the in-process unbatched ones. The CUDA tests run
only where torch sees a GPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from runner import RayExecutor, ResultStore, run_grid
from runner.execute.base import WorkItem
from runner.execute.local import LocalExecutor
from runner.grid.spec import load_grid
from tests.options import opts

pytestmark = pytest.mark.ray

SHAPE = {"d_in": 6, "d_out": 3, "m": 20, "L": 3, "width": 6, "n_iters": 30, "log_every": 4}
GRID = {
    "name": "gpu_pool",
    "blocks": [
        {"task": "deep_linear", "params": {**SHAPE, "algo": "gd"}, "product": {"lr": [0.02, 0.2, 5.0]}, "repeat": 4},
        {"task": "faulty", "product": {"x": [1.0, 2.0, 3.0]}},  # a task that computes on the CPU only
    ],
}
# where and when a run ran, and in which of its store's commits (commit_seq: flushes split by timing)
TIMING = ["batch_id", "wall_s", "started", "finished", "host", "commit_seq"]
NO_CUDA = "no CUDA device visible to torch on this machine"


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    from cluster import connect

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    gpu_node = cluster.add_node(num_cpus=2, num_gpus=1)
    cluster.wait_for_nodes()
    ray = connect(cluster.address)
    yield cluster, gpu_node.node_id
    ray.shutdown()  # this process only joined: disconnect, then stop the nodes the fixture started
    cluster.shutdown()


def _frame(root: Path, task: str) -> pd.DataFrame:
    runs = ResultStore(root).read_runs(task).to_pandas().drop(columns=TIMING)
    return runs.sort_values("run_id").reset_index(drop=True)


def test_gpu_actors_land_on_the_gpu_node_only_and_take_the_gpu_tasks(gpu_cluster: Any, tmp_path: Path) -> None:
    import ray

    cluster, gpu_node_id = gpu_cluster
    executor = RayExecutor(address=cluster.address, gpus_per_worker=0.5, workers=1)
    try:
        executor.start()
        assert executor.kinds == ["gpu", "gpu", "cpu"]  # one GPU at a half each: two GPU actors
        places = ray.get([a.placement.remote() for a in executor.actors])
        assert [node for node, _ in places[:2]] == [gpu_node_id, gpu_node_id]
        assert all(device == "cpu" for _, device in places)  # a GPU Ray counts but torch cannot see
        items = [WorkItem(c.run_id, c.task, c.params_json()) for c in load_grid(GRID).cells]
        kinds = {item.task: executor._kind(item) for item in items}
        assert kinds == {"deep_linear": "gpu", "faulty": "cpu"}
        report = run_grid(GRID, tmp_path / "ray", opts(), executor=executor)
    finally:
        executor.close()
    local = run_grid(GRID, tmp_path / "local", opts(), executor=LocalExecutor(batch=False))
    assert report.executed == local.executed == 15 and report.counts == local.counts
    for task in ("deep_linear", "faulty"):
        pd.testing.assert_frame_equal(
            _frame(tmp_path / "ray", task), _frame(tmp_path / "local", task), check_exact=True
        )


def test_without_a_gpu_share_every_actor_is_a_cpu_actor(gpu_cluster: Any) -> None:
    cluster, _ = gpu_cluster
    executor = RayExecutor(address=cluster.address, workers=2)
    try:
        executor.start()
        assert executor.kinds == ["cpu", "cpu"]
    finally:
        executor.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_cuda_batch_equals_cuda_single_runs_and_records_the_gpu(tmp_path: Path) -> None:
    batched = run_grid(GRID, tmp_path / "b", opts(), executor=LocalExecutor(device="cuda"))
    single = run_grid(GRID, tmp_path / "s", opts(), executor=LocalExecutor(device="cuda", batch=False))
    assert batched.counts == single.counts
    runs_b, runs_s = _frame(tmp_path / "b", "deep_linear"), _frame(tmp_path / "s", "deep_linear")
    # cuBLAS's batched and single matmuls round differently (the CPU's BLAS here does not: bitwise equal), and
    # GD multiplies a rounding difference by up to |1 - lr * lambda| per step: at lr 0.2, near this problem's
    # stability edge, 30 steps made 3e-11 relative of it on an H200, so 1e-10 here. A diverged run's values past
    # the stable range carry it times the growth of every step (4e-6 relative at 1e263), so for those the status
    # and the step of divergence must agree, not the blown-up numbers.
    ok = runs_s["status"] == "ok"
    pd.testing.assert_frame_equal(runs_b[ok], runs_s[ok], check_exact=False, rtol=1e-10, atol=0)
    same = ["run_id", "status", "diverged_step", "n_steps", "device"]
    pd.testing.assert_frame_equal(runs_b[same], runs_s[same])
    assert set(runs_b["device"]) == {"cuda"} and runs_b["gpu_name"].notna().all()
    assert (runs_b["gpu_memory_gb"] > 0).all()
    assert set(_frame(tmp_path / "b", "faulty")["device"]) == {"cpu"}  # a CPU task stays on the CPU


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_a_fractional_gpu_actor_caps_its_memory() -> None:
    from runner.execute.worker import claim_device

    free, total = torch.cuda.mem_get_info()
    try:
        assert claim_device("cuda", 0.25) == "cuda"  # what each GPU actor's constructor calls
        with pytest.raises(torch.cuda.OutOfMemoryError):
            torch.empty(int(total * 0.3) // 4, dtype=torch.float32, device="cuda")
        torch.empty(int(total * 0.1) // 4, dtype=torch.float32, device="cuda")  # within the cap
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert free > 0
