"""Write throughput and read times of the results store, this checkout against a baseline commit.

    python benchmarks/store.py [--runs 100000] [--steps 100] [--flush 256] [--baseline 411c227 ...]

The baseline (default: the commit before the crash-safe store) is checked out in a temporary git
worktree and measured in the same invocation, same machine, same data: each checkout runs this file
in its own subprocess (`--worker`), which
  - writes `runs` least_squares runs of `steps` curve rows each through `ResultStore.write_records`
    in flushes of `flush` runs, one commit per flush, timing only the store calls; and, where the
    checkout has it, the same flushes handed to the group-commit writer thread a driver uses (as fast
    as they come: each commit takes what queued during the one before), timed until all is committed;
  - reads them back with convgrid (`read_runs`, `read_curves`) and with pandas, DuckDB and polars
    on one task's folder, and on the whole runs/ folder (the README's one-line queries).
A client that fails on a layout prints its error instead of a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from runner.store.flush import write_records

REPO = Path(__file__).resolve().parent.parent


def _records(n: int, steps: int, seed: int) -> list[Any]:
    import numpy as np

    from runner.grid.schema import runs_schema
    from runner.store.records import RunRecord
    from tasks import get_task

    rng = np.random.default_rng(seed)
    names = runs_schema(get_task("least_squares")).names
    start = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    step_list = list(range(steps))
    for i in range(n):
        lr = float(rng.choice([1e-3, 3e-3, 1e-2, 3e-2, 1e-1]))
        row: dict[str, Any] = dict.fromkeys(names)
        row.update(
            run_id=uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i).hex,
            task="least_squares",
            version="1",
            status="ok",
            params_json=json.dumps({"lr": lr}),
            lr_rule="const",
            lr=lr,
            seed=int(rng.integers(0, 10)),
            d_in=20,
            n_iters=steps,
            err_final=float(rng.lognormal(-10, 3)),
            wall_s=0.01,
            n_steps=steps,
            started=start + timedelta(seconds=i),
            finished=start + timedelta(seconds=i, milliseconds=10),
            host="bench",
        )
        err = rng.lognormal(-5, 2, steps).tolist()
        out.append(RunRecord(row["run_id"], "least_squares", row, {"step": step_list, "err": err, "loss": err}))
    return out


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def _client(fn: Callable[[], int]) -> dict[str, Any]:
    try:
        seconds, rows = _timed(fn)
    except Exception as exc:  # noqa: BLE001 - a client failing on a layout is a result to print
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"}
    return {"s": round(seconds, 3), "rows": rows}


def worker(root: Path, runs: int, steps: int, flush: int, write_only: bool = False) -> dict[str, Any]:
    """Runs inside one checkout (cwd and sys.path are that checkout)."""
    import duckdb
    import pandas as pd
    import polars as pl

    from runner.grid.schema import task_schemas
    from runner.store import ResultStore

    store = ResultStore(root)
    batches = [_records(min(flush, runs - start), steps, seed=start) for start in range(0, runs, flush)]
    write_s = sum(_timed(lambda b=batch: write_records(store, b, task_schemas))[0] for batch in batches)
    result: dict[str, Any] = {
        "write_s": round(write_s, 2),
        "runs_per_s": round(runs / write_s),
        "curve_rows_per_s": round(runs * steps / write_s),
    }
    try:  # how this checkout's driver writes: flushes handed to a group-commit writer thread
        from runner.store.group_commit import GroupCommit
    except ImportError:
        result["group commit: runs_per_s"] = "(none)"  # a checkout from before it
    else:
        other = ResultStore(f"{root}-group")
        t0 = time.perf_counter()
        writer = GroupCommit(lambda records: write_records(other, records, task_schemas) or [])
        for batch in batches:  # all at once: the writer takes what has queued during each commit
            writer.submit(batch)
        writer.close()
        result["group commit: runs_per_s"] = round(runs / (time.perf_counter() - t0))
    if write_only:
        return result
    fresh = ResultStore(root)
    task_runs, task_curves = f"{root}/runs/task=least_squares", f"{root}/curves/task=least_squares"
    result["convgrid runs"] = _client(lambda: fresh.read_runs("least_squares").num_rows)
    result["convgrid curves"] = _client(lambda: fresh.read_curves("least_squares").num_rows)
    result["pandas runs"] = _client(lambda: len(pd.read_parquet(task_runs)))
    result["pandas curves"] = _client(lambda: len(pd.read_parquet(task_curves)))
    result["pandas runs/ (all tasks)"] = _client(lambda: len(pd.read_parquet(f"{root}/runs")))
    duck = "SELECT * FROM read_parquet('{}/*.parquet', hive_partitioning=1)"
    result["duckdb runs"] = _client(lambda: duckdb.sql(duck.format(task_runs)).arrow().read_all().num_rows)
    result["duckdb curves"] = _client(lambda: duckdb.sql(duck.format(task_curves)).arrow().read_all().num_rows)
    result["polars runs"] = _client(lambda: pl.read_parquet(f"{task_runs}/*.parquet").height)
    result["polars curves"] = _client(lambda: pl.read_parquet(f"{task_curves}/*.parquet").height)
    return result


def _run_in(tree: Path, root: Path, args: argparse.Namespace, write_only: bool = False) -> dict[str, Any]:
    cmd = [sys.executable, str(REPO / "benchmarks" / "store.py"), "--worker", str(root)]
    cmd += ["--runs", str(args.runs), "--steps", str(args.steps), "--flush", str(args.flush)]
    cmd += ["--write-only"] if write_only else []
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _interleaved(contenders: list[tuple[str, Path]], tmp: Path, args: argparse.Namespace) -> None:
    """Write runs/s of each checkout, `args.repeat` rounds, each round every checkout once in turn."""
    import statistics

    seen: dict[str, dict[str, list[float]]] = {label: {} for label, _ in contenders}
    for round_ in range(args.repeat):
        for i, (label, tree) in enumerate(contenders):
            result = _run_in(tree, tmp / f"round-{round_}-{i}", args, write_only=True)
            for key in ("runs_per_s", "group commit: runs_per_s"):
                if isinstance(result.get(key), int):
                    seen[label].setdefault(key, []).append(result[key])
    print(f"write runs/s, median of {args.repeat} interleaved rounds ({args.runs} runs, flushes of {args.flush}):")
    for label, keys in seen.items():
        cells = ", ".join(
            f"{k} {statistics.median(v):.0f} (all: {sorted(round(x) for x in v)})" for k, v in keys.items()
        )
        print(f"  {label}: {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--flush", type=int, default=256)
    parser.add_argument(
        "--baseline", action="append", help="git revision to compare with (repeatable; default 411c227)"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=0,
        help="only time writes, this many rounds, the checkouts interleaved in each; print medians "
        "(on a shared machine one pass of each is at the mercy of the load of the moment)",
    )
    parser.add_argument("--write-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        sys.path.insert(0, os.getcwd())  # this checkout's packages, not an installed copy
        print(json.dumps(worker(args.worker, args.runs, args.steps, args.flush, args.write_only)))
        return
    baselines = args.baseline or ["411c227"]
    with tempfile.TemporaryDirectory(prefix="convgrid-store-bench-") as tmp:
        trees = {f"baseline {rev}": Path(tmp) / f"baseline-{i}" for i, rev in enumerate(baselines)}
        for rev, tree in zip(baselines, trees.values(), strict=True):
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=REPO, check=True)
        try:
            results: dict[str, dict[str, Any]] = {}
            contenders = [*trees.items(), ("this checkout", REPO)]
            if args.repeat:
                _interleaved(contenders, Path(tmp), args)
                return
            for label, tree in contenders:
                results[label] = _run_in(tree, Path(tmp) / f"store-{len(results)}", args)
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, check=True)
    print(f"{args.runs} runs, {args.runs * args.steps} curve rows, flushes of {args.flush} runs")
    keys = list(next(iter(results.values())))
    print(f"{'':28}" + "".join(f"{label:>28}" for label in results))
    for key in keys:
        cells = []
        for res in results.values():
            value = res[key]
            if isinstance(value, dict):
                value = value.get("error") or f"{value['s']} s ({value['rows']} rows)"
            cells.append(f"{value!s:>28}")
        print(f"{key:28}" + "".join(cells))


if __name__ == "__main__":
    main()
