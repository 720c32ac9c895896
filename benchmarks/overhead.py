"""Overhead of the Ray executor against a plain sequential loop in one process.

    python benchmarks/overhead.py [--runs 2000] [--trivial 20000] [--workers N]

Part 1: `--runs` runs of a CPU-bound learner (least-squares GD, real arithmetic, ~5 ms each, sized
by a calibration step) through the RayExecutor on an already started embedded Ray, against the same
`run_item` calls in a sequential loop. Prints both times and their ratio (ideal: 1/workers), and the
Ray start-up time separately. Part 2: `--trivial` trivial runs through the same executor: runs/s.
Part 3: the full `run_grid` path (validation, planning, Parquet writes) for part 1's grid.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runner.execute.base import WorkItem
from runner.execute.options import ExecutionOptions
from runner.execute.ray_pool import RayExecutor
from runner.execute.worker import configure_threads, run_item
from runner.grid.spec import load_grid

QUIET = ExecutionOptions(progress=False)  # the executor is the benchmark's own; no progress bar


def learner_grid(runs: int, n_iters: int) -> dict:
    params = {"d_in": 100, "d_out": 10, "m": 200, "lr": 1e-3, "n_iters": n_iters, "log_every": 10}
    return {"name": "overhead", "blocks": [{"task": "least_squares", "params": params, "repeat": runs}]}


def items_of(grid: dict) -> list[WorkItem]:
    return [WorkItem(c.run_id, c.task, c.params_json()) for c in load_grid(grid).cells]


def sequential(items: list[WorkItem]) -> float:
    t0 = time.perf_counter()
    for item in items:
        run_item(item)
    return time.perf_counter() - t0


def through_ray(executor: RayExecutor, items: list[WorkItem]) -> float:
    t0 = time.perf_counter()
    n = sum(len(chunk) for chunk in executor.execute(items))
    assert n == len(items)
    return time.perf_counter() - t0


def calibrate(target_ms: float = 5.0) -> int:
    """n_iters such that one run takes about target_ms on this machine (single thread)."""
    n = 50
    for _ in range(4):
        per = sequential(items_of(learner_grid(40, n))) / 40 * 1e3
        n = max(1, int(n * target_ms / per))
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--trivial", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    configure_threads(1)

    n_iters = calibrate()
    items = items_of(learner_grid(args.runs, n_iters))
    seq = sequential(items)
    print(f"learner: least_squares 100x200 -> 10, n_iters={n_iters}: {seq / len(items) * 1e3:.2f} ms per run")

    from cluster import connect

    t0 = time.perf_counter()
    connect(None, num_cpus=args.workers)
    executor = RayExecutor(workers=args.workers)
    executor.start()
    executor.worker_pids()  # actors are up
    startup = time.perf_counter() - t0
    ray_s = through_ray(executor, items)
    print(f"ray start-up (embedded, {args.workers} actors): {startup:.2f} s (not counted below)")
    print(
        f"{len(items)} runs: sequential {seq:.2f} s | ray executor {ray_s:.2f} s | "
        f"ratio {ray_s / seq:.3f} (ideal {1 / args.workers:.3f})"
    )
    print(f"  chunks submitted: {executor.chunks_submitted}")

    trivial = items_of(
        {
            "blocks": [
                {
                    "task": "least_squares",
                    "params": {"d_in": 2, "d_out": 1, "m": 3, "n_iters": 1},
                    "repeat": args.trivial,
                }
            ]
        }
    )
    executor.chunks_submitted = 0
    t_triv = through_ray(executor, trivial)
    seq_triv = sequential(trivial[:2000]) / 2000 * len(trivial)
    print(
        f"{len(trivial)} trivial runs: ray {t_triv:.2f} s = {len(trivial) / t_triv:,.0f} runs/s "
        f"(sequential ~{len(trivial) / seq_triv:,.0f} runs/s); chunks submitted: {executor.chunks_submitted}"
    )

    from runner.run.grid_run import run_grid

    with tempfile.TemporaryDirectory() as root:
        t0 = time.perf_counter()
        report = run_grid(learner_grid(args.runs, n_iters), root, QUIET, executor=executor)
        full = time.perf_counter() - t0
        print(
            f"full run_grid ({report.executed} runs, validation + Parquet writes): {full:.2f} s, "
            f"ratio to sequential {full / seq:.3f}"
        )
        t0 = time.perf_counter()
        again = run_grid(learner_grid(args.runs, n_iters), root, QUIET, executor=executor)
        print(f"resume of the finished grid: {time.perf_counter() - t0:.2f} s, executed {again.executed}")
    executor.close()


if __name__ == "__main__":
    main()
