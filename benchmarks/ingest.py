"""Ingest: what finished runs cost the one driver, by curve length, with rows sent to the driver (old)
against rows written by the workers and committed by the driver from a manifest (new, issue 27).

    python benchmarks/ingest.py [--curves 10,1000,10000,100000] [--runs 500] [--actors 2] [--repeat 3]
                                [--paced-runs 200]

`--actors` Ray actors on the embedded Ray run a learner that costs nothing but its curve
(benchmarks/ingest_learner: C rows of step, loss, grad_norm as Python lists, as real learners return
them), so runs come as fast as the pool takes them and what is measured is the path of a record into
the store: `run_grid` on a fresh local root, the driver's flush policy and group commit as
`convgrid run` has them, the automatic merge after the run turned off (CONVGRID_COMPACT_PARTS=0: it is
maintenance, scheduled apart at scale; docs/scale.md). Both contenders use the same warm actors; for
each C and each repeat they run one after the other, in alternating order. Every C runs the same
number of runs, so a command's fixed costs (planning, members, claims) weigh the same in each.

Per C it prints the median over repeats of the driver's CPU seconds per 1,000 runs (time.process_time
of this process: every thread, Ray's own included), the actors' (their processes' CPU time, from
/proc), runs/s and curve rows/s end to end (the run_grid call's wall clock).

A driver also spends CPU per second, whatever it receives (Ray's own threads and waits, a commit per
flush window): ~25 ms/s here. As fast as the pool takes them, runs of 100,000 steps come ~50 times
slower than runs of 10 on two cores, so that cost weighs ~50 times more per run. The paced rounds
(new path only) separate the two: each C's runs are made to last as long as the slowest C's (the
learner sleeps the difference), so every C arrives at one pace and what remains of a difference in the
driver's CPU per run is the curve's.

A checkout without the new path (RayExecutor without `stage`) measures the old one alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ingest_learner.bench import prepare, synth_grid

prepare()

from runner.execute.options import ExecutionOptions  # noqa: E402 - after the environment above
from runner.execute.ray_pool import RayExecutor  # noqa: E402
from runner.run.grid_run import run_grid  # noqa: E402

QUIET = ExecutionOptions(progress=False)
HAS_NEW = "stage" in getattr(RayExecutor, "__dataclass_fields__", {})
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Sample:
    runs: int
    driver_s: list[float] = field(default_factory=list)
    actors_s: list[float] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    peak_mb: list[float] = field(default_factory=list)  # the driver's resident memory above its start

    def per_1000(self, which: list[float]) -> float:
        return statistics.median(which) / self.runs * 1000

    def runs_per_s(self) -> float:
        return self.runs / statistics.median(self.wall_s)


def cpu_of(pids: list[int]) -> float:
    """User and system CPU seconds of processes (the actors), from /proc."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / TICK
    return total


def resident_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakMemory:
    """The driver's resident memory, sampled every 10 ms on a thread: its peak above the start."""

    def __enter__(self) -> PeakMemory:
        self.start = self.peak = resident_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, resident_mb())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(pool: RayExecutor, new: bool, c: int, sample: Sample, root: Path, sleep_s: float = 0.0) -> None:
    """One run_grid of `sample.runs` runs of `c` curve rows; adds its CPU and wall seconds to `sample`."""
    if HAS_NEW:
        pool.stage = new  # type: ignore[attr-defined]
    pids = pool.worker_pids()
    actors0, cpu0, t0 = cpu_of(pids), time.process_time(), time.perf_counter()
    with PeakMemory() as memory:
        report = run_grid(synth_grid(f"ingest-{c}-{root.name}", sample.runs, c, sleep_s), root, QUIET, executor=pool)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    sample.peak_mb.append(memory.peak - memory.start)
    if report.counts.get("ok") != sample.runs or pool.worker_pids() != pids:
        raise SystemExit(f"{root}: expected {sample.runs} ok runs on the same actors, got {dict(report.counts)}")
    sample.driver_s.append(cpu)
    sample.actors_s.append(cpu_of(pids) - actors0)
    sample.wall_s.append(wall)
    shutil.rmtree(root)  # 100,000-step curves take a GB per 500 runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--curves", default="10,1000,10000,100000", help="curve lengths C, comma-separated")
    parser.add_argument("--runs", type=int, default=500, help="runs per C and contender")
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--paced-runs", type=int, default=200, help="runs per C in the paced rounds (0: none)")
    args = parser.parse_args()
    curves = [int(c) for c in args.curves.split(",")]
    contenders = ["old", "new"] if HAS_NEW else ["old"]

    from cluster import connect, shutdown_if_owned

    connect(None, num_cpus=args.actors)
    pool = RayExecutor(workers=args.actors, batch=False)
    pool.start()
    samples = {(name, c): Sample(args.runs) for name in contenders for c in curves}
    paced = {c: Sample(args.paced_runs) for c in curves}
    with tempfile.TemporaryDirectory(prefix="convgrid-ingest-") as tmp:
        for name in contenders:  # warm: the actors' imports, the schema cache, first calls
            measure(pool, name == "new", 10, Sample(50), Path(tmp, f"warm-{name}"))
        for rep in range(args.repeat):
            for i, c in enumerate(curves):
                for name in contenders if (rep + i) % 2 == 0 else contenders[::-1]:
                    s = samples[(name, c)]
                    measure(pool, name == "new", c, s, Path(tmp, f"{name}-{c}-{rep}"))
                    print(
                        f"  round {rep + 1} C={c} {name}: driver CPU {s.driver_s[-1]:.2f} s, actors' CPU "
                        f"{s.actors_s[-1]:.2f} s, wall {s.wall_s[-1]:.2f} s, driver peak +{s.peak_mb[-1]:.0f} MB, "
                        f"{s.runs} runs",
                        flush=True,
                    )
        last = contenders[-1]
        if args.paced_runs:
            # each run lasts what the slowest C's run took (a run's seconds on one actor: actors / runs/s)
            natural = {c: args.actors / samples[(last, c)].runs_per_s() for c in curves}
            pace = 1.1 * max(natural.values())
            for c in curves:
                measure(pool, last == "new", c, paced[c], Path(tmp, f"paced-{c}"), pace - natural[c])
                print(f"  paced C={c}: driver CPU {paced[c].driver_s[-1]:.2f} s, wall {paced[c].wall_s[-1]:.2f} s")
    pool.close()
    shutdown_if_owned()

    def rows_s(name: str, c: int) -> float:
        return samples[(name, c)].runs_per_s() * c

    print(
        f"ingest, {args.actors} actors, {args.runs} runs per C, medians of {args.repeat} rounds "
        "(driver CPU s / 1,000 runs; actors' CPU s / 1,000 runs; runs/s; curve rows/s; driver's peak memory "
        "above its start)"
    )
    for c in curves:
        cells = []
        for name in contenders:
            s = samples[(name, c)]
            cells.append(
                f"{name}: {s.per_1000(s.driver_s):.2f} s, actors {s.per_1000(s.actors_s):.2f} s, "
                f"{s.runs_per_s():,.0f} runs/s, {rows_s(name, c):,.0f} rows/s, +{statistics.median(s.peak_mb):.0f} MB"
            )
        ratio = f" | new/old rows/s {rows_s('new', c) / rows_s('old', c):.2f}x" if HAS_NEW else ""
        print(f"C={c}: " + " | ".join(cells) + ratio)
    lo, hi = min(curves), max(curves)
    raw = samples[(last, hi)].per_1000(samples[(last, hi)].driver_s) / samples[(last, lo)].per_1000(
        samples[(last, lo)].driver_s
    )
    at_pace = ""
    if args.paced_runs:
        pace_runs_s = ", ".join(f"C={c} {paced[c].runs_per_s():.1f}" for c in curves)
        cpu = ", ".join(f"C={c} {paced[c].per_1000(paced[c].driver_s):.2f} s" for c in curves)
        print(f"paced ({last} path; runs/s {pace_runs_s}): driver CPU per 1,000 runs {cpu}")
        at_pace = (
            f" (at one pace {paced[hi].per_1000(paced[hi].driver_s) / paced[lo].per_1000(paced[lo].driver_s):.2f})"
        )
    g = f"{rows_s('new', 10_000) / rows_s('old', 10_000):.2f}" if HAS_NEW and 10_000 in curves else "n/a"
    print(f"ingest: driver CPU per run C={hi}/C={lo} ratio {raw:.2f}{at_pace}; curve rows/s at C=10000 new/old {g}")


if __name__ == "__main__":
    main()
