"""Batched execution (issue 16): many configs of one shape as one computation, against one at a time.

    python benchmarks/vectorized.py [--part configs|grid|all] [--repeats 3] [--configs 64]

Part `configs`: 64 same-shape configs of each case (deep_linear GD and BCGD, depth 10, widths 8, 16,
32, 64; linear_resnet m = 40, depth 10; ldminv 100 x 100, K = 4, L = 4) through the real executor
path in this process (`run_grid` with the in-process executor, one thread, Parquet writes included),
batched against `batch=False`, alternating, `--repeats` times each; prints the fastest and median
times and `speed-up` = fastest one-at-a-time / fastest batched. A task without `run_batch` (or whose
configs have no batch key) prints that instead of a number.

Part `grid`: grids/bench/batched_deep_linear.yaml (256 runs, one shape) through `convgrid run` on Ray
with 2 workers: an embedded Ray started once here, each command in its own process joining it by
address, batched and `--no-batch` interleaved, `--repeats` times each. Prints each command's wall time
(driver start, actor start, runs, writes) and the span of its runs in the store (first start to last
finish), as min / median / max, and the speed-ups of both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from runner import ResultStore, run_grid  # noqa: E402 - after the Ray environment and the path are set
from runner.execute.local import LocalExecutor  # noqa: E402
from runner.grid.identity import validate_params  # noqa: E402
from runner.grid.spec import load_grid  # noqa: E402
from tasks.base import BatchableTask  # noqa: E402
from tasks.registry import get_task  # noqa: E402

GRID_FILE = REPO / "grids" / "bench" / "batched_deep_linear.yaml"


def cases(n: int) -> list[tuple[str, str, dict[str, Any], dict[str, list[Any]]]]:
    """(label, task, fixed params, axes) of each n-config case: one shape, members differ in seed and step."""
    seeds = {"seed": list(range(n))}
    out = []
    for width in (8, 16, 32, 64):
        shape = {"d_in": width, "d_out": width // 2, "m": 4 * width, "L": 10, "width": width, "n_iters": 200}
        # four step sizes that converge at this width (the stable range shrinks as the width grows)
        gd = {"lr": [0.016 / width * (1 + k % 4) for k in range(n)], **seeds}
        out.append((f"deep_linear gd   width {width:<3d} depth 10", "deep_linear", {**shape, "algo": "gd"}, gd))
        out.append((f"deep_linear bcgd width {width:<3d} depth 10", "deep_linear", {**shape, "algo": "bcgd"}, seeds))
    resnet = {"algo": "gd", "m": 40, "depth": 10, "n_iters": 200}
    out.append(("linear_resnet gd m 40 depth 10", "linear_resnet", resnet, seeds))
    ldminv = {"algo": "minv", "rows": 100, "cols": 100, "K": 4, "L": 4, "iters": 50}
    out.append(("ldminv minv 100x100 K 4 L 4", "ldminv", ldminv, seeds))
    return out


def grid_of(label: str, task: str, fixed: dict[str, Any], axes: dict[str, list[Any]]) -> dict[str, Any]:
    """A grid whose cells zip the axes (n cells, not a product)."""
    n = len(next(iter(axes.values())))
    cells = [{**fixed, **{k: v[i] for k, v in axes.items()}} for i in range(n)]
    return {"name": label.replace(" ", "_"), "blocks": [{"task": task, "params": c} for c in cells]}


def not_batched(task_name: str, grid: dict[str, Any]) -> str | None:
    """Why this case cannot run batched here, or None."""
    task = get_task(task_name)
    if not isinstance(task, BatchableTask):
        return f"no run_batch for {task_name} yet"
    keys = {task.batch_key(validate_params(task, b["params"])) for b in grid["blocks"]}
    return f"{task_name}: these configs have no single batch key" if len(keys) != 1 or None in keys else None


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def part_configs(n: int, repeats: int, only: str) -> None:
    print(f"== {n} same-shape configs, in process, run_grid + LocalExecutor (1 thread), store writes included")
    with tempfile.TemporaryDirectory() as tmp:
        warm = grid_of("warm", *cases(4)[2][1:])  # imports and first-call costs out of the timings
        run_grid(warm, Path(tmp, "warm"), LocalExecutor(), progress=False)
        for label, task, fixed, axes in cases(n):
            if only not in label:
                continue
            grid = grid_of(label, task, fixed, axes)
            reason = not_batched(task, grid)
            if reason is not None:
                print(f"{label:<36} {reason}", flush=True)
                continue
            times: dict[bool, list[float]] = {True: [], False: []}
            for r in range(repeats):
                for batch in (r % 2 == 0, r % 2 != 0):  # alternate which goes first
                    root = Path(tmp, f"{grid['name']}-{r}-{batch}")
                    executor = LocalExecutor(batch=batch)
                    times[batch].append(timed(lambda g=grid, d=root, e=executor: run_grid(g, d, e, progress=False)))
            one, many = times[False], times[True]
            print(
                f"{label:<36} one at a time {min(one):7.2f} s (median {statistics.median(one):.2f})   "
                f"batched {min(many):6.2f} s (median {statistics.median(many):.2f})   "
                f"speed-up {min(one) / min(many):.1f}",
                flush=True,
            )


def _convgrid(results: Path, address: str, batch: bool) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "runner.cli", "run", str(GRID_FILE), "--results", str(results)]
    cmd += ["--address", address, "--workers", "2", "--no-progress", *([] if batch else ["--no-batch"])]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"convgrid run failed:\n{proc.stderr[-3000:]}")
    runs = ResultStore(results).read_runs("deep_linear", columns=["started", "finished"]).to_pandas()
    if len(runs) != len(load_grid(GRID_FILE).cells):
        raise RuntimeError(f"expected every cell stored, found {len(runs)}")
    span = (runs["finished"].max() - runs["started"].min()).total_seconds()
    return wall, span


def _line(name: str, values: list[float]) -> str:
    return f"{name} min {min(values):6.2f} s  median {statistics.median(values):6.2f} s  max {max(values):6.2f} s"


def part_grid(repeats: int) -> None:
    from cluster import connect, shutdown_if_owned

    print(f"== {GRID_FILE.relative_to(REPO)} through `convgrid run` on Ray, 2 workers, each command its own process")
    ray = connect(None, num_cpus=2)
    address = ray.get_runtime_context().gcs_address
    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(repeats):
                for batch in (r % 2 == 0, r % 2 != 0):
                    results[batch].append(_convgrid(Path(tmp, f"{r}-{batch}"), address, batch))
                    print(
                        f"  repeat {r} {'batched ' if batch else '--no-batch'}: wall {results[batch][-1][0]:.2f} s, "
                        f"runs span {results[batch][-1][1]:.2f} s",
                        flush=True,
                    )
    finally:
        shutdown_if_owned()
    for batch in (False, True):
        name = "batched   " if batch else "--no-batch"
        print(_line(f"{name} command wall", [w for w, _ in results[batch]]))
        print(_line(f"{name} runs span   ", [s for _, s in results[batch]]))
    for i, what in ((0, "command wall"), (1, "runs span")):
        one = [x[i] for x in results[False]]
        many = [x[i] for x in results[True]]
        ratio_min, ratio_median = min(one) / min(many), statistics.median(one) / statistics.median(many)
        print(f"whole grid speed-up ({what}): {ratio_min:.1f} (min/min), {ratio_median:.1f} (median/median)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["configs", "grid", "all"], default="all")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", type=int, default=64)
    ap.add_argument("--only", default="", help="part configs: only the cases whose label contains this")
    args = ap.parse_args()
    from runner.execute.worker import configure_threads

    configure_threads(1)
    if args.part in ("configs", "all"):
        part_configs(args.configs, args.repeats, args.only)
    if args.part in ("grid", "all"):
        part_grid(args.repeats)


if __name__ == "__main__":
    main()
