"""The same grid of ~10 ms runs, five ways, each its own process timed from spawn to exit.

    python benchmarks/vs_sequential_and_ray_tune.py [--runs 2000] [--rounds 3] [--tune-default-trials 100]
                                                    [--only NAME,...] [--against [LABEL=]TREE ...]

The grid: `--runs` least_squares runs (d_in 200, d_out 10, m 100, n_iters 200, seeds 0..runs-1).
Contenders, run in a rotating order within each round:
  sequential     one process: validate every config, then `task.run` in a plain loop (the floor a
                 single core gives; no store, no records)
  chunked-ray    embedded Ray, one remote task per chunk of 50 configs, `ray.get` of all (hand-written
                 parallelism without a store: the floor of this machine's cores)
  convgrid       `convgrid run GRID --results FRESH_DIR` (embedded Ray, Parquet store, progress off;
                 the default executor, auto: cells run in the driver while Ray starts); every
                 convgrid contender's process ends as the `convgrid` command's does (benchmarks.as_typed)
  convgrid-ray   the same with `--executor ray` (every cell on Ray: the driver waits for Ray to start)
  local-1        `convgrid run --executor local --workers 1`: every cell in the driver, one at a time
  local-2        `convgrid run --executor local --workers 2`: in the driver, two runs at once in threads
                 (the learner is thread-safe), one torch thread each
  tune-reuse     Ray Tune over the same configs, `reuse_actors=True`, a function trainable reporting
                 the final error (storage in a fresh folder)
  tune-default   Ray Tune with its defaults, capped at `--tune-default-trials` configs and
                 extrapolated linearly to `--runs` (it starts a new worker per trial)
`--against [LABEL=]TREE` (repeatable) adds, in every round, each convgrid contender kept (convgrid*, local-*;
`--against-only` narrows them) run from another source tree (say, a `git archive` of the commit before a
change, or a copy with one mechanism switched off) with this Python, labelled "NAME@LABEL" ("@against"
without one): a before/after measured interleaved on the same shared machine (benchmarks.trees).
Printed per contender: seconds min/median/max over rounds, and the ratio to `sequential` of the same
round, min/median/max, and the median CPU seconds of the processes it waited for (the driver and what
it spawned and reaped; Ray's workers mostly not). The machine may be shared: ratios within a round
are the numbers to quote.
Ray's workers run at niceness 15 by default (Ray's worker_niceness): on a shared machine the runs
would get the CPU last, behind the sequential loop at the caller's niceness. Every contender here
starts Ray through `cluster.connect`, which sets RAY_worker_niceness=0 for the embedded Ray (unless the
caller set it), so all contenders run at the caller's niceness alike.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PARAMS = {"d_in": 200, "d_out": 10, "m": 100, "n_iters": 200}


def configs(runs: int) -> list[dict[str, Any]]:
    return [{**PARAMS, "seed": s} for s in range(runs)]


def grid_yaml(runs: int) -> str:
    params = ", ".join(f"{k}: {v}" for k, v in PARAMS.items())
    return f"name: vs_sequential\nblocks:\n  - task: least_squares\n    params: {{{params}}}\n    repeat: {runs}\n"


def run_configs(batch: list[dict[str, Any]]) -> list[float]:
    """The work itself, identical for every contender: validate and run, return the final errors."""
    from runner.execute.worker import configure_threads
    from runner.grid.identity import validate_params
    from tasks import RunContext, get_task

    configure_threads(1)
    task = get_task("least_squares")
    return [float(task.run(validate_params(task, c), RunContext()).summary["err_final"]) for c in batch]


# ---- contenders (each runs in a fresh interpreter: `python THIS --contender NAME`) ------------------
def sequential(runs: int, _: int, __: Path) -> None:
    assert len(run_configs(configs(runs))) == runs


def _ray() -> Any:
    from cluster import connect

    return connect(None)  # the same embedded start convgrid uses (127.0.0.1, no dashboard)


def chunked_ray(runs: int, _: int, __: Path) -> None:
    ray = _ray()
    remote = ray.remote(run_configs)
    todo = configs(runs)
    refs = [remote.remote(todo[i : i + 50]) for i in range(0, runs, 50)]
    assert sum(len(r) for r in ray.get(refs)) == runs
    ray.shutdown()


def _tune(runs: int, tmp: Path, **tune_config: Any) -> None:
    ray = _ray()
    from ray import tune

    def trainable(config: dict[str, Any]) -> dict[str, float]:
        return {"err_final": run_configs([config])[0]}

    space = {**PARAMS, "seed": tune.grid_search(list(range(runs)))}
    tuner = tune.Tuner(
        trainable,
        param_space=space,
        tune_config=tune.TuneConfig(**tune_config),
        run_config=tune.RunConfig(storage_path=str(tmp / "tune"), verbose=0),
    )
    results = tuner.fit()
    assert len(results) == runs and not results.errors
    ray.shutdown()


def tune_reuse(runs: int, _: int, tmp: Path) -> None:
    _tune(runs, tmp, reuse_actors=True)


def tune_default(_: int, cap: int, tmp: Path) -> None:
    _tune(cap, tmp)


def convgrid(runs: int, _: int, tmp: Path, *options: str) -> None:
    (tmp / "grid.yaml").write_text(grid_yaml(runs))
    from runner.cli import main as cli

    code = cli(["run", str(tmp / "grid.yaml"), "--results", str(tmp / "results"), "--no-progress", *options])
    assert code == 0
    sys.path.insert(0, str(REPO))  # this benchmark's helpers (an --against tree lacks them)
    from benchmarks.as_typed import end_as_the_command_does

    end_as_the_command_does()


def convgrid_ray(runs: int, cap: int, tmp: Path) -> None:
    convgrid(runs, cap, tmp, "--executor", "ray")


def local_1(runs: int, cap: int, tmp: Path) -> None:
    convgrid(runs, cap, tmp, "--executor", "local", "--workers", "1")


def local_2(runs: int, cap: int, tmp: Path) -> None:
    convgrid(runs, cap, tmp, "--executor", "local", "--workers", "2")


CONTENDERS = {
    "sequential": sequential,
    "chunked-ray": chunked_ray,
    "convgrid": convgrid,
    "convgrid-ray": convgrid_ray,
    "local-1": local_1,
    "local-2": local_2,
    "tune-reuse": tune_reuse,
    "tune-default": tune_default,
}


def timed(name: str, runs: int, cap: int, trees: dict[str, Path]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one contender's process; the CPU seconds are those of the processes
    it waited for (Ray's workers mostly not), which other jobs on a shared machine change far less."""
    from benchmarks.trees import resolve, tree_env

    contender, tree = resolve(name, trees)
    env = tree_env(tree)  # the tree's runner first, for the contender and for Ray's workers alike
    with tempfile.TemporaryDirectory(prefix=f"vs-{contender}-") as tmp:
        argv = [sys.executable, __file__, "--contender", contender, "--runs", str(runs), "--tune-default-trials"]
        t0, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([*argv, str(cap), "--tmp", tmp], cwd=tree, env=env, capture_output=True, text=True)
        wall, now = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{name} exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    cpu = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    scale = runs / cap if name == "tune-default" else 1.0
    return wall * scale, cpu * scale


def spread(values: list[float]) -> str:
    return f"{min(values):8.2f} {statistics.median(values):8.2f} {max(values):8.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tune-default-trials", type=int, default=100)
    ap.add_argument("--only", default=",".join(CONTENDERS), help="comma-separated contenders (sequential always)")
    ap.add_argument(
        "--against", action="append", metavar="[LABEL=]TREE", help="another source tree: its convgrid contenders too"
    )
    ap.add_argument("--against-only", default=None, help="with --against: only these contenders run from it too")
    ap.add_argument("--contender", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.contender:
        sys.path.insert(0, os.environ.get("BENCH_TREE") or str(REPO))
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        CONTENDERS[args.contender](args.runs, args.tune_default_trials, Path(args.tmp))
        return
    names = ["sequential", *(n for n in args.only.split(",") if n != "sequential")]
    sys.path.insert(0, str(REPO))
    from benchmarks.machine import header, load
    from benchmarks.trees import parse_trees, with_trees

    trees = parse_trees(args.against)
    again = args.against_only.split(",") if args.against_only else names
    ours = [n for n in names if n.startswith(("convgrid", "local")) and n in again]
    names += with_trees(ours, trees)[len(ours) :]  # each of ours also run from each tree

    print(f"{header()}\n{args.runs} least_squares runs {PARAMS}; {args.rounds} rounds")
    seconds: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    ratios: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate: no contender always goes first
        measured = {name: timed(name, args.runs, args.tune_default_trials, trees) for name in order}
        walls = {name: wall for name, (wall, _) in measured.items()}
        for name in names:
            seconds[name].append(walls[name])
            cpus[name].append(measured[name][1])
            ratios[name].append(walls[name] / walls["sequential"])
        line = ", ".join(f"{n} {walls[n]:.1f}s (CPU {measured[n][1]:.1f}s)" for n in names)
        print(f"round {r + 1}: {line} ({load()}, {time.strftime('%H:%M UTC', time.gmtime())})", flush=True)
    print(f"\n{'contender':<20} {'seconds min/median/max':>26}   {'/ sequential min/median/max':>26}   CPU s (median)")
    for name in names:
        note = f"  (extrapolated from {args.tune_default_trials} trials)" if name == "tune-default" else ""
        cpu = statistics.median(cpus[name])
        print(f"{name:<20} {spread(seconds[name])}   {spread(ratios[name])}   {cpu:8.1f}{note}")


if __name__ == "__main__":
    main()
