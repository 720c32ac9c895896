"""Batched execution (issue 16): many configs of one shape as one computation, against one at a time.

    python benchmarks/vectorized.py [--part configs|grid|all] [--repeats 3] [--configs 64]

Part `configs` (`--device cuda` on a GPU): 64 same-shape configs of each case (deep_linear GD and
BCGD, depth 10, widths 8, 16, 32, 64; linear_resnet m = 40, depth 10; ldminv 100 x 100, K = 4, L = 4)
through the real executor path in this process (`run_grid` with the in-process executor, one worker
and one thread, Parquet writes included), batched against `batch=False`, alternating, `--repeats` times
each (`--clock cpu`: CPU seconds of the process instead of wall seconds, steadier on a shared machine;
`BENCH_TREE=DIR` times the runner of another source tree instead of this one's); prints
the fastest and median time per run and `speed-up` = fastest one-at-a-time / fastest batched, per run.
On a GPU, where a batch of 64 is small, `--configs 1024 --max-batch 1024 --single-sample 64` times one
at a time on 64 of them. A task without `run_batch` (or whose configs have no batch key) prints that
instead of a number.

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
from dataclasses import fields
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, os.environ.get("BENCH_TREE") or str(REPO))  # BENCH_TREE: time another source tree's runner

from runner import ResultStore, run_grid  # noqa: E402 - after the Ray environment and the path are set
from runner.execute.local import LocalExecutor  # noqa: E402
from runner.execute.options import ExecutionOptions  # noqa: E402
from runner.grid.identity import validate_params  # noqa: E402
from runner.grid.spec import load_grid  # noqa: E402
from tasks.base import BatchableTask  # noqa: E402
from tasks.registry import get_task  # noqa: E402

QUIET = ExecutionOptions(progress=False)  # the executor is the benchmark's own; no progress bar
# One run (or batch) at a time in this thread: what batching is measured against (a tree from before the
# in-process executor had threads takes no `workers` and ran one at a time)
ONE = {"workers": 1} if "workers" in {f.name for f in fields(LocalExecutor)} else {}

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


# `--clock cpu`: the CPU seconds of this process (all its threads), which other jobs on a shared machine
# change far less than the wall clock; `wall` (default): what a user waits
CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCK["wall"]


def timed(fn: Callable[[], Any]) -> float:
    t0 = clock()
    fn()
    return clock() - t0


def part_configs(n: int, repeats: int, only: str, device: str, max_batch: int, sample: int | None) -> None:
    k = min(n, sample or n)
    print(
        f"== {n} same-shape configs on {device}, in process, run_grid + LocalExecutor (1 thread), store writes "
        f"included, {'CPU' if clock is time.process_time else 'wall'} seconds; "
        f"included; batches of up to {max_batch}; one at a time: {'all' if k == n else f'the first {k}'} configs"
    )
    with tempfile.TemporaryDirectory() as tmp:
        warm = grid_of("warm", *cases(4)[2][1:])  # imports and first-call costs out of the timings
        run_grid(warm, Path(tmp, "warm"), QUIET, executor=LocalExecutor(device=device, **ONE))
        for label, task, fixed, axes in cases(n):
            if only not in label:
                continue
            grid = grid_of(label, task, fixed, axes)
            reason = not_batched(task, grid)
            if reason is not None:
                print(f"{label:<36} {reason}", flush=True)
                continue
            # this case's first-call costs out of the timings: imports (torch.optim's first optimizer imports
            # torch._dynamo), CUDA kernels loaded, and the data each seed draws once and caches (ldminv's
            # test matrices): every config is run once, batched, and a first one alone
            for batch, blocks in ((True, grid["blocks"]), (False, grid["blocks"][:1])):
                warm_case = {**grid, "name": f"{grid['name']}_warm{batch}", "blocks": blocks}
                run_grid(
                    warm_case,
                    Path(tmp, f"{grid['name']}-warm-{batch}"),
                    QUIET,
                    executor=LocalExecutor(batch=batch, device=device, max_batch=max_batch, **ONE),
                )
            # one at a time on the first k configs only where a sample is asked for (on a GPU a run alone costs
            # the same whatever its seed or step): its time per run is what the batched time per run is held to
            single = {**grid, "name": f"{grid['name']}_first{k}", "blocks": grid["blocks"][:k]}
            per_run: dict[bool, list[float]] = {True: [], False: []}
            for r in range(repeats):
                for batch in (r % 2 == 0, r % 2 != 0):  # alternate which goes first
                    root = Path(tmp, f"{grid['name']}-{r}-{batch}")
                    executor = LocalExecutor(batch=batch, device=device, max_batch=max_batch, **ONE)
                    g = grid if batch else single
                    per_run[batch].append(timed(lambda g=g, d=root, e=executor: run_grid(g, d, QUIET, executor=e)))
                    per_run[batch][-1] /= n if batch else k
            ms = {b: (1e3 * min(v), 1e3 * statistics.median(v)) for b, v in per_run.items()}
            print(
                f"{label:<36} one at a time {ms[False][0]:7.2f} ms per run (median {ms[False][1]:.2f})   "
                f"batched {ms[True][0]:6.2f} ms per run (median {ms[True][1]:.2f})   "
                f"speed-up {ms[False][0] / ms[True][0]:.1f}",
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
    ap.add_argument("--device", default="cpu", help="part configs: where the tasks compute (cpu, cuda)")
    ap.add_argument("--max-batch", type=int, default=64, help="part configs: the largest batch (the executor's)")
    ap.add_argument("--single-sample", type=int, default=None, help="part configs: time one at a time on this many")
    ap.add_argument("--clock", choices=list(CLOCK), default="wall", help="part configs: wall seconds or CPU seconds")
    args = ap.parse_args()
    global clock
    clock = CLOCK[args.clock]
    from runner.execute.worker import configure_threads

    configure_threads(1)
    from benchmarks.machine import header

    print(header(), flush=True)
    if args.part in ("configs", "all"):
        part_configs(args.configs, args.repeats, args.only, args.device, args.max_batch, args.single_sample)
    if args.part in ("grid", "all"):
        part_grid(args.repeats)


if __name__ == "__main__":
    main()
