"""The embedded Ray executor: same stores as in-process, chunking, completion order."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from runner import RayExecutor, ResultStore, run_grid
from runner.execute.base import WorkItem

GRID = {
    "name": "eq",
    "blocks": [
        {
            "task": "least_squares",
            "params": {"d_in": 8, "m": 30, "n_iters": 60, "cond": 20.0},
            "product": {"lr": [0.01, 0.05, 0.1, 9.0]},
            "repeat": 3,
        },
        {"task": "least_squares", "params": {"lr_rule": "optimal", "n_iters": 40}, "repeat": 2},
    ],
}
PROVENANCE = ["batch_id", "wall_s", "started", "finished", "host", "device"]


def _store_frames(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    store = ResultStore(root)
    runs = store.read_runs("least_squares").to_pandas().drop(columns=PROVENANCE)
    curves = store.read_curves("least_squares").to_pandas().drop(columns=["batch_id"])
    return runs.sort_values("run_id").reset_index(drop=True), curves.reset_index(drop=True)


def test_ray_and_local_executors_give_identical_stores(tmp_path: Path, ray_local: object) -> None:
    local = run_grid(GRID, tmp_path / "local", "local", progress=False)
    remote = run_grid(GRID, tmp_path / "ray", RayExecutor(workers=2), progress=False)
    assert local.executed == remote.executed == 14
    assert local.counts == remote.counts and remote.counts["diverged"] == 3
    runs_l, curves_l = _store_frames(tmp_path / "local")
    runs_r, curves_r = _store_frames(tmp_path / "ray")
    pd.testing.assert_frame_equal(runs_l, runs_r, check_exact=True)
    pd.testing.assert_frame_equal(curves_l, curves_r, check_exact=True)
    assert (ResultStore(tmp_path / "ray").read_runs("least_squares")["host"].to_pylist()[0]) is not None


def test_chunks_grow_once_run_times_are_known(ray_local: object) -> None:
    from runner.grid.spec import load_grid

    grid = load_grid(
        {"blocks": [{"task": "least_squares", "params": {"d_in": 4, "m": 10, "n_iters": 5}, "repeat": 400}]}
    )
    items = [WorkItem(c.run_id, c.task, c.params_json()) for c in grid.cells]
    executor = RayExecutor(workers=2, target_chunk_s=0.5)
    try:
        seen = [r.run_id for chunk in executor.execute(items) for r in chunk]
    finally:
        executor.close()
    assert sorted(seen) == sorted(i.run_id for i in items)
    # 400 runs of well under a millisecond: far fewer Ray calls than runs
    assert executor.chunks_submitted < 40


def test_cli_driver_joins_an_existing_cluster_by_address(tmp_path: Path, ray_local) -> None:
    import subprocess
    import sys

    import yaml

    from tests.conftest import REPO

    address = ray_local.get_runtime_context().gcs_address
    grid = tmp_path / "g.yaml"
    grid.write_text(
        yaml.safe_dump({"name": "joined", "blocks": [{"task": "least_squares", "product": {"lr": [0.01, 0.02, 0.03]}}]})
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner.cli",
            "run",
            str(grid),
            "--results",
            str(tmp_path / "r"),
            "--address",
            address,
            "--no-progress",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ran 3 of 3 cells" in proc.stdout
    assert ray_local.is_initialized()  # the driver left the shared cluster running
    assert len(ResultStore(tmp_path / "r").done_ids()) == 3


def test_embedded_workers_run_at_the_drivers_priority(ray_local: object) -> None:
    """Ray's default worker niceness (15) would leave the runs the CPU last on a busy machine."""
    import os

    import ray

    @ray.remote
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote()) == os.nice(0)
