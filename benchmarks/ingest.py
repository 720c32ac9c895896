"""Ingest: what finished runs cost the one driver, by curve length, with rows sent to the driver (old)
against rows written by the workers and committed by the driver from a manifest (new, issue 27).

    python benchmarks/ingest.py [--curves 10,1000,10000,100000] [--runs 500] [--actors 2] [--repeat 3]

`--actors` Ray actors on the embedded Ray run a learner that costs nothing but its curve
(benchmarks/ingest_learner: C rows of step, loss, grad_norm as Python lists, as real learners return
them), so runs come as fast as the pool takes them and what is measured is the path of a record into
the store: `run_grid` on a fresh local root, the driver's flush policy and group commit as
`convgrid run` has them, the automatic merge after the run turned off (CONVGRID_COMPACT_PARTS=0: it is
maintenance, scheduled apart at scale; docs/scale.md). Both contenders use the same warm actors; for
each C and each repeat they run one after the other, in alternating order. Per C it prints the median
over repeats of the driver's CPU seconds per 1,000 runs (time.process_time of this process: every
thread, Ray's own included), runs/s and curve rows/s end to end (the run_grid call's wall clock).
Every C runs the same number of runs, so a command's fixed costs (planning, members, claims) weigh the
same in each, and a driver's cost that grows with C shows as such.

A checkout without the new path (RayExecutor without `stage`) measures the old one alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ["CONVGRID_COMPACT_PARTS"] = "0"
_learners = os.environ.get("CONVGRID_LEARNERS", "")
os.environ["CONVGRID_LEARNERS"] = ",".join(filter(None, [_learners, "synth=benchmarks.ingest_learner"]))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
sys.path.insert(0, str(REPO))

from runner.execute.options import ExecutionOptions  # noqa: E402 - after the environment above
from runner.execute.ray_pool import RayExecutor  # noqa: E402
from runner.run.grid_run import run_grid  # noqa: E402

QUIET = ExecutionOptions(progress=False)
HAS_NEW = "stage" in getattr(RayExecutor, "__dataclass_fields__", {})


def grid(c: int, runs: int, tag: str) -> dict[str, object]:
    return {
        "name": f"ingest-{c}-{tag}",
        "blocks": [{"task": "synth", "params": {"steps": c}, "product": {"seed": list(range(runs))}}],
    }


def measure(pool: RayExecutor, new: bool, c: int, runs: int, root: Path) -> tuple[float, float]:
    """(driver CPU seconds, wall seconds) of one run_grid of `runs` runs of `c` curve rows."""
    if HAS_NEW:
        pool.stage = new  # type: ignore[attr-defined]
    cpu0, t0 = time.process_time(), time.perf_counter()
    report = run_grid(grid(c, runs, root.name), root, QUIET, executor=pool)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if report.counts.get("ok") != runs:
        raise SystemExit(f"{root}: expected {runs} ok runs, got {dict(report.counts)}")
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curves", default="10,1000,10000,100000", help="curve lengths C, comma-separated")
    parser.add_argument("--runs", type=int, default=500, help="runs per C and contender")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    curves = [int(c) for c in args.curves.split(",")]
    runs = dict.fromkeys(curves, args.runs)
    contenders = ["old", "new"] if HAS_NEW else ["old"]

    from cluster import connect, shutdown_if_owned

    connect(None, num_cpus=args.actors)
    pool = RayExecutor(workers=args.actors, batch=False)
    pool.start()
    cpu: dict[tuple[str, int], list[float]] = {}
    wall: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="convgrid-ingest-") as tmp:
        for name in contenders:  # warm: the actors' imports, the schema cache, first calls
            measure(pool, name == "new", 10, 50, Path(tmp, f"warm-{name}"))
        for rep in range(args.repeat):
            for i, c in enumerate(curves):
                order = contenders if (rep + i) % 2 == 0 else contenders[::-1]
                for name in order:
                    root = Path(tmp, f"{name}-{c}-{rep}")
                    spent, took = measure(pool, name == "new", c, runs[c], root)
                    shutil.rmtree(root)  # 100,000-step curves take a GB per 500 runs
                    cpu.setdefault((name, c), []).append(spent)
                    wall.setdefault((name, c), []).append(took)
                    print(
                        f"  round {rep + 1} C={c} {name}: driver CPU {spent:.2f} s, wall {took:.2f} s, {runs[c]} runs",
                        flush=True,
                    )
    pool.close()
    shutdown_if_owned()

    def per_1000(name: str, c: int) -> float:
        return statistics.median(cpu[(name, c)]) / runs[c] * 1000

    def rows_s(name: str, c: int) -> float:
        return runs[c] * c / statistics.median(wall[(name, c)])

    print(
        f"ingest, {args.actors} actors, medians of {args.repeat} rounds "
        "(driver CPU s / 1,000 runs; runs/s; curve rows/s)"
    )
    for c in curves:
        cells = []
        for name in contenders:
            run_s = runs[c] / statistics.median(wall[(name, c)])
            cells.append(f"{name}: {per_1000(name, c):.2f} s, {run_s:,.0f} runs/s, {rows_s(name, c):,.0f} rows/s")
        ratio = f" | new/old rows/s {rows_s('new', c) / rows_s('old', c):.2f}x" if HAS_NEW else ""
        print(f"C={c}: " + " | ".join(cells) + ratio)
    last = "new" if HAS_NEW else "old"
    r = per_1000(last, max(curves)) / per_1000(last, min(curves))
    if HAS_NEW and 10_000 in curves:
        g = f"{rows_s('new', 10_000) / rows_s('old', 10_000):.2f}"
    else:
        g = "n/a (no new path in this checkout)"
    print(
        f"ingest: driver CPU per run C={max(curves)}/C={min(curves)} ratio {r:.2f}; curve rows/s at C=10000 new/old {g}"
    )


if __name__ == "__main__":
    main()
