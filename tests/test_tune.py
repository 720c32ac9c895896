"""`convgrid tune` on the local executor: calibration against the theory's best step, pruning,
how run statuses become trial states, runs shared through the store, and trials/ + members/."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import optuna
import pyarrow.compute as pc
import pytest

from runner.execute.local import LocalExecutor
from runner.store import ResultStore
from runner.store.trials import read_trials
from runner.tune.driver import run_study, tune
from runner.tune.optuna_adapter import load_plans as load_study
from runner.tune.optuna_adapter import open_storage
from tests.options import opts

# Depth-1 least squares with cond(X) = 3: X X^T has lambda_max = 4, lambda_min = 4/9, so the best
# constant step is 2/(lambda_max + lambda_min) = 0.45 and the error contracts by 0.8 per step.
# 100 steps keep the error (about 1e-21 at the best step) clear of float64's floor.
LS_PARAMS = {"d_in": 10, "d_out": 2, "m": 40, "cond": 3.0, "n_iters": 100, "tol": 1e-300, "log_every": 5}


def ls_study(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "task": "least_squares",
        "params": dict(LS_PARAMS),
        "space": {"lr": {"type": "float", "low": 0.05, "high": 0.6, "log": True}},
        "objective": {"metric": "err_final", "direction": "minimize", "log": True},
        "report": ["lr_opt_theory"],
        **extra,
    }


def lr_opt_theory(report: Any) -> float:
    return float(report.best[0]["metrics"]["lr_opt_theory"])


def test_grid_study_finds_best_constant_step_within_one_grid_step(tmp_path: Path) -> None:
    raw = ls_study("ls_grid", sampler={"name": "grid"}, parallel=4)
    raw["space"] = {"lr": {"type": "float", "low": 0.40, "high": 0.50, "step": 0.005}}
    (report,) = tune(raw, tmp_path, opts())
    assert report.states == {"COMPLETE": 21}
    opt = lr_opt_theory(report)
    assert math.isclose(opt, 0.45, rel_tol=1e-6)
    assert abs(report.best[0]["params"]["lr"] - opt) <= 0.005 * (1 + 1e-6)  # one grid step


def test_tpe_study_finds_best_constant_step(tmp_path: Path) -> None:
    # deterministic: asked in batches, told in trial order, so the seeded TPE sees the same history however the
    # two trials in flight finish (async, their order follows the machine's load)
    study = ls_study("ls_tpe", sampler={"name": "tpe", "seed": 1}, n_trials=40, parallel=2, mode="deterministic")
    (report,) = tune(study, tmp_path, opts())
    assert report.states == {"COMPLETE": 40}
    best = report.best[0]["params"]["lr"]
    assert abs(best - lr_opt_theory(report)) / 0.45 < 0.02, best
    # Every trial is a run: trials/ links each trial to a runs/ row with the told value.
    store = ResultStore(tmp_path)
    trials = read_trials(store, "ls_tpe").to_pylist()
    runs = {r["run_id"]: r for r in store.read_runs("least_squares").to_pylist()}
    assert len(trials) == 40 and [t["number"] for t in trials] == list(range(40))
    for t in trials:
        run = runs[t["run_id"]]
        assert math.isclose(t["value"], math.log10(run["err_final"]), rel_tol=1e-12)
        assert math.isclose(json.loads(t["params_json"])["lr"], run["lr"], rel_tol=1e-15)
    members = store.read_members()
    mine = members.filter(pc.equal(members["grid"], "ls_tpe"))
    assert set(mine["kind"].to_pylist()) == {"study"} and set(mine["run_id"].to_pylist()) == {
        t["run_id"] for t in trials
    }


@pytest.mark.parametrize(
    ("sampler", "pruner"),
    [("cmaes", "successive_halving"), ("gp", "hyperband"), ("random", "median"), ("tpe", "nop")],
)
def test_every_sampler_and_pruner_runs_a_study(tmp_path: Path, sampler: str, pruner: str) -> None:
    raw = ls_study(f"s_{sampler}", sampler={"name": sampler, "seed": 0}, n_trials=6, parallel=2)
    if pruner != "nop":
        raw["pruner"] = {"name": pruner, "metric": "err"}
    (report,) = tune(raw, tmp_path, opts())
    assert report.states["COMPLETE"] + report.states["PRUNED"] == 6 and not report.states["FAIL"]


def enqueue(root: Path, raw: dict[str, Any], points: list[dict[str, Any]]) -> None:
    """Put trials in the study's queue before the driver starts (Optuna's own enqueue_trial)."""
    plan = load_study(raw)[0]
    storage = open_storage(None, ResultStore(root)).optuna_storage
    study = optuna.create_study(storage=storage, study_name=plan.name, directions=plan.directions)
    for point in points:
        study.enqueue_trial(point)


def prune_study(root: Path, name: str, **params: Any) -> dict[str, Any]:
    """A median-pruned study of three trials enqueued in `root`'s journal: two good steps, then a slow one
    (lr 0.06) that the pruner stops once it has two finished trials to compare with."""
    raw = ls_study(
        name,
        params={**LS_PARAMS, **params},
        pruner={"name": "median", "metric": "err", "options": {"n_startup_trials": 2, "n_warmup_steps": 20}},
        n_trials=3,
        parallel=1,
    )
    enqueue(root, raw, [{"lr": 0.45}, {"lr": 0.4}, {"lr": 0.06}])
    return raw


def test_pruner_stops_a_bad_trial_early_and_records_it(tmp_path: Path) -> None:
    raw = prune_study(tmp_path, "ls_prune", n_iters=400)
    (report,) = tune(raw, tmp_path, opts())
    assert report.states == {"COMPLETE": 2, "PRUNED": 1}
    store = ResultStore(tmp_path)
    trial = read_trials(store, "ls_prune").to_pylist()[2]
    assert trial["state"] == "PRUNED" and trial["run_status"] == "pruned"
    run = store.read_runs("least_squares", ["status", "n_steps", "lr"]).to_pylist()
    (bad,) = [r for r in run if r["run_id"] == trial["run_id"]]
    assert bad["status"] == "pruned" and bad["lr"] == 0.06
    assert 20 <= bad["n_steps"] <= 30  # the local reporter stops it at the first step the pruner judges
    # The pruned run is not done: its curve is kept, and asking the same params again runs it again.
    assert store.read_curves("least_squares", [trial["run_id"]]).num_rows == bad["n_steps"] // 5


def test_run_statuses_become_trial_states(tmp_path: Path) -> None:
    raw = ls_study("ls_states", n_trials=3, parallel=3, sampler={"name": "random", "seed": 0})
    raw["space"]["lr"]["high"] = 5.0
    raw["objective"] = {"metric": "iters_to_tol", "direction": "minimize"}
    enqueue(tmp_path, raw, [{"lr": 0.45}, {"lr": 3.0}, {"lr": 0.3}])  # ok, diverges (> 2/lambda_max), ok
    raw["params"]["tol"] = 1e-6
    (report,) = tune(raw, tmp_path, opts())
    rows = {r["number"]: r for r in read_trials(ResultStore(tmp_path), "ls_states").to_pylist()}
    assert (rows[0]["state"], rows[1]["state"], rows[2]["state"]) == ("COMPLETE", "PRUNED", "COMPLETE")
    assert rows[1]["run_status"] == "diverged" and rows[1]["note"] == "run diverged"

    faulty = {
        "name": "faults",
        "task": "faulty",
        "space": {
            "x": {"type": "float", "low": 1.0, "high": 2.0, "step": 1.0},
            "fail": {"type": "categorical", "choices": [False, True]},
        },
        "objective": {"metric": "square"},
        "sampler": "grid",
    }
    (report,) = tune(faulty, tmp_path, opts())
    assert report.states == {"COMPLETE": 2, "FAIL": 2}
    assert report.stopped_early == "the grid is covered"
    failed = [r for r in read_trials(ResultStore(tmp_path), "faults").to_pylist() if r["state"] == "FAIL"]
    assert {r["run_status"] for r in failed} == {"failed"} and all(r["run_id"] for r in failed)


def test_trials_with_stored_runs_are_told_without_running(tmp_path: Path) -> None:
    raw = ls_study("first", sampler={"name": "grid"}, parallel=3)
    raw["space"] = {"lr": {"type": "float", "low": 0.1, "high": 0.5, "step": 0.1}}
    (first,) = tune(raw, tmp_path, opts())
    assert first.ran == 5 and first.from_store == 0
    raw["name"] = "second"  # another study asking for the same cells shares their runs
    (second,) = tune(raw, tmp_path, opts())
    assert second.ran == 0 and second.from_store == 5
    assert [b["values"] for b in second.best] == [b["values"] for b in first.best]
    # the summary's metrics: the first study's from the runs it ran, the second's read back from the store
    # (the rows that answered its trials lack flops), the same numbers either way
    assert [b["metrics"] for b in second.best] == [b["metrics"] for b in first.best]
    assert all(v is not None for v in first.best[0]["metrics"].values()), first.best[0]
    members = ResultStore(tmp_path).read_members()
    assert sorted(set(members["grid"].to_pylist())) == ["first", "second"]
    # Asking again for more finished trials than exist continues the same study.
    (more,) = tune(ls_study("first2", n_trials=4, parallel=2), tmp_path, opts())
    (again,) = tune(ls_study("first2", n_trials=6, parallel=2), tmp_path, opts())
    assert sum(more.states.values()) == 4 and sum(again.states.values()) == 6
    assert len(read_trials(ResultStore(tmp_path), "first2")) == 6


def test_a_grown_study_asks_new_points_and_stays_reproducible(tmp_path: Path) -> None:
    """A seeded sampler started again draws what it drew at the study's start: a study grown from 4 to 8
    trials asked for its first 4 params again (4 runs told from the store, nothing explored). Each start
    is seeded for the trials the study has, so the new trials are new points, and the same history gives
    the same points."""

    def grow(root: Path) -> list[float]:
        raw = ls_study("grown", sampler={"name": "random", "seed": 0}, parallel=1, n_trials=4)
        (first,) = tune(raw, root, opts(), n_trials=4)
        (second,) = tune(raw, root, opts(), n_trials=8)
        assert first.ran == 4 and second.ran == 4 and second.from_store == 0, second.format()
        trials = read_trials(ResultStore(root), "grown").to_pylist()
        return [json.loads(t["params_json"])["lr"] for t in sorted(trials, key=lambda t: t["number"])]

    lrs = grow(tmp_path / "a")
    assert len(set(lrs)) == 8, lrs
    assert grow(tmp_path / "b") == lrs


def test_baselines_run_once_and_belong_to_the_study(tmp_path: Path) -> None:
    raw = ls_study("with_base", n_trials=2, parallel=2, baselines=[{"params": {"lr_rule": "optimal", "lr": None}}])
    plan = load_study(raw)[0]
    report = run_study(plan, tmp_path, LocalExecutor(), opts())
    (base,) = report.baselines
    assert base["status"] == "ok" and base["run_id"] == plan.baselines[0].run_id
    members = ResultStore(tmp_path).read_members().to_pylist()
    assert {m["run_id"] for m in members if m["block"] == 1} == {base["run_id"]}
    again = run_study(plan, tmp_path, LocalExecutor(), opts())
    assert again.ran == 0 and again.baselines == report.baselines


def test_runs_executed_counts_baselines_and_repaired_runs(tmp_path: Path) -> None:
    """`N runs executed` is every run the command executed: a study's baseline, its trials', and the runs
    of told trials that the store lacks (here: the same journal against a new results root, as after a
    driver killed before its flush), which run again at start."""
    raw = ls_study("counted", n_trials=3, parallel=1, baselines=[{"params": {"lr_rule": "optimal", "lr": None}}])
    journal = str(tmp_path / "shared.journal")
    (first,) = tune(raw, tmp_path / "a", opts(), storage=journal)
    assert first.ran == 4 and sum(first.counts.values()) == 4 and "4 runs executed" in first.format()
    (moved,) = tune(raw, tmp_path / "b", opts(), storage=journal)
    assert moved.repaired == 3 and moved.ran == 4, moved.format()  # 3 trials' runs and the baseline
    assert "4 runs executed" in moved.format() and "run again: 3" in moved.format()
    assert ResultStore(tmp_path / "b").read_runs("least_squares", ["status"]).num_rows == 4
