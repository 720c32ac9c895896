"""Trials per second of `convgrid tune` against Optuna's own `study.optimize(n_jobs=2)`, in memory
and with a journal file, on a short (~0.5 ms) and a longer (~10 ms) objective, 2 trials in flight.

    python benchmarks/tune_throughput.py [--repeats 3] [--fast-trials 600] [--slow-trials 300] [--json out.json]
                                         [--only CONTENDER,...] [--objectives fast,slow]
                                         [--against [LABEL=]TREE ...]

Every contender runs in its own process, the contenders of a round in rotated order, `--repeats`
rounds; printed are min / median / max over the rounds of the ratios within a round (convgrid's
trials/s over optimize's), so a machine shared with other jobs slows both sides of a ratio alike.

The objective is one least-squares GD run, log10 of its final error as a function of the constant
step, TPE seeded (constant liar on, as convgrid sets it for parallel > 1), no pruner:
  fast: d_in 10, d_out 2, m 40, 50 steps (~0.5 ms on an idle core)
  slow: d_in 200, d_out 10, m 100, 200 steps (~10 ms)
Each child prints the objective's measured median time, so the labels can be checked.

Two clocks per contender, and its CPU time:
  study: inside the child, from the first ask to the last tell, after start-up (imports; for
         convgrid Ray, its two actors and one warm-up run on each), i.e. trials/s of the tuner;
  process: from spawning the child to its exit (start-up and teardown included);
  cpu: CPU seconds of the child and of what it reaped (Ray's workers mostly not), the work each
       side does, which other jobs on a shared machine change far less than the clocks.

Contenders (2 in flight each):
  convgrid async       `convgrid tune` (default mode) on Ray, 2 actors, parallel 2, journal file;
                       every trial a run in the Parquet store (checked, with the number of part files)
  convgrid determ.     the same with mode: deterministic (ask 2, run, tell in trial order)
  convgrid command     `convgrid tune STUDY --results DIR` as a user types it (async, journal file): the
                       default executor runs the first trials in the driver and starts the embedded Ray
                       in the background only once the timed trials say it pays (runner.execute.warm;
                       printed: whether it did); nothing is warmed before the clock, so its "study"
                       clock is the whole command after the interpreter and its imports, and the
                       process clock is the one to compare; the child ends its process as the
                       `convgrid` command does (runner.cli.process_exit, where the tree has it)
  optimize memory      study.optimize(n_jobs=2), InMemoryStorage, the same objective in 2 threads
  optimize journal     the same with JournalStorage(JournalFileBackend); also printed against optimize
                       memory: what the journal alone costs Optuna's own loop, so how far behind optimize
                       in memory a tuner that keeps one (convgrid does, by default) starts

`--only` keeps some contenders (comma-separated; the optimize ones are always kept: they are the
baselines). `--against [LABEL=]TREE` (repeatable) adds, in every round, each of convgrid's contenders
kept run from another source tree (say, a `git archive` of the commit before a change, or a copy with one
mechanism switched off) with this Python, labelled "@LABEL" ("@against" without one): a before/after
measured interleaved on the same shared machine, its ratios within each round (benchmarks.trees).

Ray starts its workers at niceness 15 (`RAY_worker_niceness`): on a machine shared with other jobs,
convgrid's actors would then run behind everyone else while optimize's threads run at the caller's
niceness. Children get RAY_worker_niceness=0, so every process of every contender runs at the
niceness the benchmark was started with.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["RAY_worker_niceness"] = "0"  # noqa: SIM112 - Ray reads this exact name; all contenders at one niceness
REPO = Path(__file__).resolve().parent.parent
TREE = Path(os.environ.get("BENCH_TREE") or REPO)  # the source tree a child runs (--against: another one)
sys.path.insert(0, str(TREE))

OBJECTIVES: dict[str, dict[str, Any]] = {
    "fast": {"d_in": 10, "d_out": 2, "m": 40, "cond": 3.0, "n_iters": 50, "tol": 1e-300, "log_every": 10},
    "slow": {"d_in": 200, "d_out": 10, "m": 100, "n_iters": 200, "tol": 1e-300, "log_every": 50},
}
LOW, HIGH = 0.01, 0.6
CONTENDERS = ["convgrid async", "convgrid determ.", "convgrid command", "optimize memory", "optimize journal"]
BASELINES = ["optimize memory", "optimize journal"]
CLOCKS = ("study_s", "process_s", "cpu_s")


def study_file(objective: str, trials: int, mode: str) -> dict[str, Any]:
    return {
        "name": f"bench_{objective}",
        "task": "least_squares",
        "params": OBJECTIVES[objective],
        "space": {"lr": {"type": "float", "low": LOW, "high": HIGH, "log": True}},
        "objective": {"metric": "err_final", "log": True},
        "sampler": {"name": "tpe", "seed": 0},
        "n_trials": trials,
        "parallel": 2,
        "mode": mode,
    }


def child_convgrid(objective: str, trials: int, root: Path, mode: str) -> dict[str, Any]:
    from runner import RayExecutor
    from runner.execute.base import WorkItem
    from runner.execute.options import ExecutionOptions  # here: a tree from before it (--against) runs the CLI only
    from runner.tune.driver import tune
    from runner.tune.optuna_adapter import load_plans

    plans = load_plans(study_file(objective, trials, mode))  # as the CLI: validated before anything runs
    executor = RayExecutor(workers=2)
    warm = [WorkItem(f"warm{i}", "least_squares", {**OBJECTIVES[objective], "lr": 0.1}) for i in range(2)]
    assert sum(len(r) for r in executor.execute(warm)) == 2  # both actors have imported and run the task
    t0 = time.perf_counter()
    (report,) = tune(plans, root, ExecutionOptions(progress=False), executor=executor)  # no progress bar
    wall = time.perf_counter() - t0
    executor.close()
    assert sum(report.states.values()) == trials, report.states
    return stored_study(root, objective, wall)


def child_command(objective: str, trials: int, root: Path) -> dict[str, Any]:
    """`convgrid tune STUDY --results ROOT` as a user runs it: the default executor (the embedded Ray
    started in the background while the first trials run in this process), nothing warmed up before."""
    import yaml

    from runner.cli import main

    root.mkdir(parents=True, exist_ok=True)
    study = root / "study.yaml"
    study.write_text(yaml.safe_dump(study_file(objective, trials, "async")))
    t0 = time.perf_counter()
    assert main(["tune", str(study), "--results", str(root), "--no-progress"]) == 0
    # the command imports ray only to start it (runner.execute.ray_pool imports it on first use)
    return {**stored_study(root, objective, time.perf_counter() - t0), "ray_started": "ray" in sys.modules}


def stored_study(root: Path, objective: str, wall: float) -> dict[str, Any]:
    """What the store holds of a convgrid study: trials, how many have their run stored, in how many parts."""
    from runner import ResultStore
    from runner.store.trials import read_trials

    store = ResultStore(root)
    rows = read_trials(store, f"bench_{objective}").to_pylist()
    runs = store.read_runs("least_squares", ["status", "wall_s"]).to_pylist()
    stored = {r["run_id"] for r in runs}
    return {
        "study_s": wall,
        "trials": len(rows),
        "trials_with_stored_run": sum(r["run_id"] in stored for r in rows),
        "run_parts": len(store.parts("runs", "task=least_squares")),
        "objective_ms": 1e3 * statistics.median(r["wall_s"] for r in runs),
    }


def objective_value(objective: str, lr: float) -> float:
    """The same run convgrid executes, in this process."""
    import math

    from runner.grid.identity import validate_params
    from tasks import RunContext, get_task

    task = get_task("least_squares")
    result = task.run(validate_params(task, {**OBJECTIVES[objective], "lr": lr}), RunContext())
    return math.log10(max(result.summary["err_final"], 1e-300))


def child_optuna(objective: str, trials: int, root: Path, journal: bool) -> dict[str, Any]:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    root.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(root / "optuna.journal"))) if journal else None
    sampler = optuna.samplers.TPESampler(seed=0, constant_liar=True)
    study = optuna.create_study(storage=storage, sampler=sampler, study_name=f"bench_{objective}")
    times: list[float] = []

    def run(trial: Any) -> float:
        t = time.perf_counter()
        value = objective_value(objective, trial.suggest_float("lr", LOW, HIGH, log=True))
        times.append(time.perf_counter() - t)
        return value

    objective_value(objective, 0.1)  # import and warm the task before the clock
    t0 = time.perf_counter()
    study.optimize(run, n_trials=trials, n_jobs=2)
    wall = time.perf_counter() - t0
    return {
        "study_s": wall,
        "trials": len(study.trials),
        "trials_with_stored_run": 0,
        "run_parts": 0,
        "objective_ms": 1e3 * statistics.median(times),
    }


def child(contender: str, objective: str, trials: int, root: Path) -> dict[str, Any]:
    if contender == "convgrid command":
        return child_command(objective, trials, root)
    if contender.startswith("convgrid"):
        return child_convgrid(objective, trials, root, "async" if contender == "convgrid async" else "deterministic")
    return child_optuna(objective, trials, root, journal=contender == "optimize journal")


def spawn(contender: str, objective: str, trials: int, root: Path, trees: dict[str, Path]) -> dict[str, Any]:
    from benchmarks.trees import resolve, tree_env

    name, tree = resolve(contender, trees)
    cmd = [sys.executable, __file__, "--child", name, "--objective", objective, "--trials", str(trials)]
    t0, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    env = tree_env(tree)  # Ray's workers import the tree's runner too (not an installed copy)
    proc = subprocess.run([*cmd, "--root", str(root)], cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
    wall, now = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{contender} {objective} failed:\n{proc.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_s"] = wall
    # CPU seconds of the child and what it reaped (Ray's workers mostly not): steadier than wall time when shared
    out["cpu_s"] = now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime
    return out


def spread(values: list[float]) -> str:
    return f"{min(values):5.2f} / {statistics.median(values):5.2f} / {max(values):5.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fast-trials", type=int, default=600)
    parser.add_argument("--slow-trials", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None, help="also write every measurement here")
    parser.add_argument("--only", default=",".join(CONTENDERS), help="comma-separated contenders (baselines always)")
    parser.add_argument("--objectives", default=",".join(OBJECTIVES), help="comma-separated: fast, slow")
    parser.add_argument(
        "--against", action="append", metavar="[LABEL=]TREE", help="another source tree: its convgrid contenders too"
    )
    parser.add_argument("--child", choices=CONTENDERS, help=argparse.SUPPRESS)
    parser.add_argument("--objective", choices=list(OBJECTIVES), help=argparse.SUPPRESS)
    parser.add_argument("--trials", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.objective, args.trials, args.root)))
        if args.child == "convgrid command":
            sys.path.insert(0, str(REPO))  # this benchmark's helpers (an --against tree lacks them)
            from benchmarks.as_typed import end_as_the_command_does

            end_as_the_command_does()
        return 0

    sys.path.insert(0, str(REPO))
    from benchmarks.machine import header, load
    from benchmarks.trees import parse_trees, with_trees

    trees = parse_trees(args.against)
    print(header(), flush=True)
    trials = {"fast": args.fast_trials, "slow": args.slow_trials}
    objectives = [o for o in OBJECTIVES if o in args.objectives.split(",")]
    kept = [c for c in args.only.split(",") if c in CONTENDERS and c not in BASELINES]
    ours = with_trees(kept, trees)
    contenders = ours + BASELINES
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tune-bench-") as tmp:
        for rnd in range(args.repeats):
            for objective in objectives:
                order = contenders[rnd % len(contenders) :] + contenders[: rnd % len(contenders)]
                for contender in order:
                    root = Path(tmp) / f"r{rnd}-{objective}-{contender.replace(' ', '_').replace('@', '')}"
                    out = spawn(contender, objective, trials[objective], root, trees)
                    out.update(round=rnd, objective=objective, contender=contender)
                    results.append(out)
                    print(
                        f"round {rnd} {objective} {contender:26s} {trials[objective] / out['study_s']:7.1f} trials/s "
                        f"(study {out['study_s']:6.2f} s, process {out['process_s']:6.2f} s, "
                        f"CPU {out['cpu_s']:6.2f} s, objective {out['objective_ms']:.2f} ms, "
                        f"{out['trials_with_stored_run']} trials with a stored run in {out['run_parts']} parts)"
                        + (" Ray started" if out.get("ray_started") else "")
                        + f" [{load()}]",
                        flush=True,
                    )
    print(f"\n{header()}; ratios of trials/s within a round, min / median / max over {args.repeats} rounds")
    pairs = [(mine, theirs) for mine in ours for theirs in BASELINES]
    pairs += [(mine, f"{mine}@{label}") for mine in kept for label in trees]  # this tree / the other
    # Optuna's own loop with a journal against itself in memory: what keeping a journal costs, whoever's loop
    pairs.append(("optimize journal", "optimize memory"))
    seconds = {(r["round"], r["objective"], r["contender"], clock): r[clock] for r in results for clock in CLOCKS}
    for objective in objectives:
        for clock in CLOCKS:
            for mine, theirs in pairs:
                ratios = [
                    seconds[rnd, objective, theirs, clock] / seconds[rnd, objective, mine, clock]
                    for rnd in range(args.repeats)
                ]
                print(f"{objective} {clock.removesuffix('_s'):7s} {mine:26s} / {theirs:26s} {spread(ratios)}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
