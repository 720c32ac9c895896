"""Trials per second for short trials: `convgrid tune` against Optuna's own `study.optimize(n_jobs=2)`
and against Ray Tune with OptunaSearch, all on the same objective and the same TPE sampler.

    python benchmarks/tune_throughput.py [--trials 500] [--skip-raytune] [--json out.json]

The objective is one short least-squares GD run (depth 1, 10x40 data, 100 steps, about 1 ms):
log10 of the final error as a function of the constant step, TPE seeded, no pruner. Every
contender has 2 trials in flight on this 2-core machine, and Ray is started once beforehand (its
start-up is not counted). What each one does per trial differs, and that is what is measured:

* convgrid tune (ray): batched ask of 2, two actors run the runs, runs+curves Parquet parts written
  before the tell, trials/ and members/ parts every 10 s, study in a journal file.
* convgrid tune (local): the same driver with the in-process executor (no Ray round trips).
* optuna optimize(n_jobs=2): two threads each ask/run/tell in the driver (GIL-bound), nothing stored
  but the study (journal file, as convgrid; and in memory).
* Ray Tune + OptunaSearch: one Ray Tune trial per Optuna trial (function trainable, 1 CPU each,
  actors reused), study in memory inside the searcher, Ray Tune's default per-trial result files
  under a temporary folder.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PARAMS = {"d_in": 10, "d_out": 2, "m": 40, "cond": 3.0, "n_iters": 100, "tol": 1e-300, "log_every": 10}
LOW, HIGH = 0.05, 0.6


def study_file(name: str, trials: int, parallel: int) -> dict[str, Any]:
    return {
        "name": name,
        "task": "least_squares",
        "params": PARAMS,
        "space": {"lr": {"type": "float", "low": LOW, "high": HIGH, "log": True}},
        "objective": {"metric": "err_final", "log": True},
        "sampler": {"name": "tpe", "seed": 0},
        "n_trials": trials,
        "parallel": parallel,
    }


def objective_value(lr: float) -> float:
    """The same run convgrid executes, in this process."""
    from runner.grid.identity import validate_params
    from tasks import RunContext, get_task

    task = get_task("least_squares")
    result = task.run(validate_params(task, {**PARAMS, "lr": lr}), RunContext())
    return math.log10(max(result.summary["err_final"], 1e-300))


def bench_convgrid(trials: int, executor: str, parallel: int, root: Path) -> tuple[float, float]:
    from runner import RayExecutor
    from runner.tune.driver import tune

    runner = RayExecutor(workers=2) if executor == "ray" else "local"
    if executor == "ray":
        runner.worker_pids()  # start the actors before the clock
    t0 = time.perf_counter()
    (report,) = tune(study_file(f"bench_{executor}_{parallel}", trials, parallel), root, runner, progress=False)
    wall = time.perf_counter() - t0
    if executor == "ray":
        runner.close()
    assert sum(report.states.values()) == trials, report.states
    return wall, report.best[0]["values"][0]


def bench_optuna(trials: int, storage_path: Path | None) -> tuple[float, float]:
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(storage_path))) if storage_path else None
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=0), study_name="bench_optuna")
    objective_value(0.3)  # import and warm the task before the clock
    t0 = time.perf_counter()
    study.optimize(lambda t: objective_value(t.suggest_float("lr", LOW, HIGH, log=True)), n_trials=trials, n_jobs=2)
    return time.perf_counter() - t0, study.best_value


def bench_raytune(trials: int, root: Path) -> tuple[float, float]:
    import optuna
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def trainable(config: dict[str, Any]) -> dict[str, float]:
        return {"value": objective_value(config["lr"])}

    search = OptunaSearch(
        space={"lr": optuna.distributions.FloatDistribution(LOW, HIGH, log=True)},
        metric="value",
        mode="min",
        sampler=optuna.samplers.TPESampler(seed=0),
    )
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        # reuse_actors: without it every trial starts a new actor and Ray Tune runs about 0.5 trials/s here.
        tune_config=tune.TuneConfig(search_alg=search, num_samples=trials, max_concurrent_trials=2, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=str(root), name="bench_raytune", verbose=0),
    )
    t0 = time.perf_counter()
    results = tuner.fit()
    wall = time.perf_counter() - t0
    assert len(results) == trials
    return wall, results.get_best_result(metric="value", mode="min").metrics["value"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--skip-raytune", action="store_true")
    parser.add_argument("--only-raytune", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    from cluster import connect, shutdown_if_owned

    t0 = time.perf_counter()
    connect(None, num_cpus=2)
    ray_start = time.perf_counter() - t0
    rows: list[tuple[str, float, float]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="tune-bench-") as tmp:
            root = Path(tmp)
            contenders = [
                (
                    "convgrid tune, ray executor, parallel 2",
                    lambda: bench_convgrid(args.trials, "ray", 2, root / "cg_ray2"),
                ),
                (
                    "convgrid tune, ray executor, parallel 8",
                    lambda: bench_convgrid(args.trials, "ray", 8, root / "cg_ray8"),
                ),
                (
                    "convgrid tune, local executor, parallel 2",
                    lambda: bench_convgrid(args.trials, "local", 2, root / "cg_local"),
                ),
                ("optuna optimize n_jobs=2, journal file", lambda: bench_optuna(args.trials, root / "optuna.journal")),
                ("optuna optimize n_jobs=2, in memory", lambda: bench_optuna(args.trials, None)),
            ]
            raytune = [("ray tune + OptunaSearch, 2 concurrent", lambda: bench_raytune(args.trials, root / "raytune"))]
            contenders = raytune if args.only_raytune else contenders + ([] if args.skip_raytune else raytune)
            for name, run in contenders:
                wall, best = run()
                rows.append((name, wall, best))
                print(
                    f"{name:45s} {args.trials / wall:8.1f} trials/s   ({wall:6.1f} s, best log10 err {best:.2f})",
                    flush=True,
                )
    finally:
        shutdown_if_owned()
    print(f"(Ray start-up, not counted above: {ray_start:.1f} s; {args.trials} trials each; {os.cpu_count()} CPUs)")
    if args.json:
        args.json.write_text(
            json.dumps(
                [{"contender": n, "wall_s": w, "trials_per_s": args.trials / w, "best": b} for n, w, b in rows],
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
