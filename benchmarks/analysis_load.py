"""How fast `analysis.load` and `analysis.curves` read a large store.

    python benchmarks/analysis_load.py [--runs 100000] [--steps 100] [--parts 200] [--keep DIR]

Generates a store shaped exactly like the runner's (the least_squares task's explicit schemas, hive
partitions, part files, a members table) with `runs` runs and `runs * steps` curve rows, then times:
all summaries, a few summary columns, a filtered subset, one grid, every curve row of the task, and
the curves of a 1% subset of runs. The baseline printed beside each is a raw `pyarrow.parquet`
read of the same files in the same process, so the ratio is the cost of de-duplication and joins.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

import analysis
from runner.grid.schema import curves_schema, runs_schema
from runner.store import ResultStore
from runner.store.columns import MEMBER_SCHEMA
from tasks import get_task


def generate(root: Path, runs: int, steps: int, parts: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    task = get_task("least_squares")
    store = ResultStore(root)
    rschema, cschema = runs_schema(task), curves_schema(task)
    per_part = runs // parts
    now = datetime.now(UTC)
    member_ids = []
    for p in range(parts):
        n = per_part
        ids = [uuid.UUID(int=int(rng.integers(0, 2**63)) * 2**64 + p * per_part + i).hex for i in range(n)]
        batch = uuid.uuid4().hex
        lr = rng.choice([1e-3, 3e-3, 1e-2, 3e-2, 1e-1], n)
        seed_col = rng.integers(0, 10, n)
        err_final = rng.lognormal(-10, 3, n)
        cols: dict[str, object] = {name: pa.nulls(n, rschema.field(name).type) for name in rschema.names}
        cols.update(
            run_id=pa.array(ids),
            task=pa.array(["least_squares"] * n),
            version=pa.array(["1"] * n),
            status=pa.array(np.where(err_final > 1e3, "diverged", "ok")),
            batch_id=pa.array([batch] * n),
            params_json=pa.array([json.dumps({"lr": float(v)}) for v in lr]),
            lr_rule=pa.array(["const"] * n),
            lr=pa.array(lr),
            seed=pa.array(seed_col),
            d_in=pa.array(np.full(n, 20)),
            n_iters=pa.array(np.full(n, steps)),
            err_final=pa.array(err_final),
            wall_s=pa.array(rng.uniform(0.001, 0.01, n)),
            flops=pa.array(rng.uniform(1e6, 1e7, n)),
            n_steps=pa.array(np.full(n, steps)),
            finished=pa.array([now + timedelta(microseconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")),
        )
        step = np.tile(np.arange(1, steps + 1), n)
        err = np.exp(-np.repeat(rng.uniform(0.01, 0.3, n), steps) * step)
        curves = pa.table(
            {
                "run_id": pa.array(np.repeat(np.array(ids, dtype=object), steps)),
                "batch_id": pa.array([batch] * (n * steps)),
                "step": pa.array(step),
                "err": pa.array(err),
                "loss": pa.array(err * 0.5),
            },
            schema=cschema,
        )
        store.write_part(curves, "curves", "task=least_squares")
        store.write_part(pa.table(cols, schema=rschema), "runs", "task=least_squares")
        member_ids.extend(ids[: max(1, n // 10)])
    members = pa.table(
        {
            "run_id": member_ids,
            "task": ["least_squares"] * len(member_ids),
            "grid": ["tenth"] * len(member_ids),
            "kind": ["grid"] * len(member_ids),
            "source": ["generated"] * len(member_ids),
            "block": pa.array([0] * len(member_ids), pa.int32()),
            "added": pa.array([now] * len(member_ids), pa.timestamp("us", tz="UTC")),
        },
        schema=MEMBER_SCHEMA,
    )
    store.write_part(members, "members")


def timed(label: str, fn, baseline=None) -> None:
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    extra = ""
    if baseline is not None:
        t0 = time.perf_counter()
        baseline()
        base = time.perf_counter() - t0
        extra = f" | raw pyarrow read {base:.2f} s, ratio {dt / base:.2f}"
    print(f"{label:<48} {dt:7.2f} s  ({len(out):,} rows){extra}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--parts", type=int, default=200)
    ap.add_argument("--keep", type=Path, default=None, help="write the store here and keep it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        t0 = time.perf_counter()
        generate(root, args.runs, args.steps, args.parts)
        print(
            f"generated {args.runs:,} runs and {args.runs * args.steps:,} curve rows in {args.parts} parts: "
            f"{time.perf_counter() - t0:.1f} s"
        )
        runs_dir, curves_dir = root / "runs" / "task=least_squares", root / "curves" / "task=least_squares"
        timed(
            "load: every summary column",
            lambda: analysis.load(root, "least_squares"),
            lambda: ds.dataset(runs_dir).to_table().to_pandas(),
        )
        timed("load: 3 columns", lambda: analysis.load(root, "least_squares", columns=["lr", "seed", "err_final"]))
        timed(
            "load: filter lr == 0.01",
            lambda: analysis.load(root, "least_squares", filters={"lr": 0.01}, columns=["err_final"]),
        )
        timed(
            "load: one grid (10% of runs)",
            lambda: analysis.load(root, "least_squares", grid="tenth", columns=["err_final"]),
        )
        timed(
            "curves: every row of the task",
            lambda: analysis.curves(root, "least_squares"),
            lambda: ds.dataset(curves_dir).to_table().to_pandas(),
        )
        subset = analysis.load(root, "least_squares", filters={"seed": 3, "lr": 0.1}, columns=[])
        timed(
            f"curves: {len(subset):,} runs (filter seed, lr)",
            lambda: analysis.curves(root, "least_squares", runs=subset),
        )


if __name__ == "__main__":
    main()
