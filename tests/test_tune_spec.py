"""Study files: validation errors name the file, the key and the valid choices (exit 2, nothing
written), as grid files do; sweeps expand into one study each; baselines merge over fixed params."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from runner.cli import main
from runner.errors import ConfigError
from runner.tune.optuna_adapter import load_plans as load_study
from tests.conftest import files_under

GOOD = {
    "name": "ls",
    "task": "least_squares",
    "params": {"d_in": 6, "d_out": 2, "m": 20, "n_iters": 30},
    "space": {"lr": {"type": "float", "low": 0.01, "high": 1.0, "log": True}},
    "objective": {"metric": "err_final", "log": True},
    "n_trials": 5,
}


def _with(**changes: object) -> dict:
    raw = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is None:
            raw.pop(key)
        else:
            raw[key] = value
    return raw


BAD = {
    "unknown_task": (_with(task="least_sqares"), "task", ["unknown task", "least_squares"]),
    "unknown_key": (_with(n_trial=3), "n_trial", ["valid choices: name, description, task"]),
    "space_param_unknown": (
        _with(space={"learning_rate": {"type": "float", "low": 0.1, "high": 1}}),
        "space.learning_rate",
        ["does not take this param", "lr"],
    ),
    "space_bad_type": (
        _with(space={"lr": {"type": "double", "low": 0.1, "high": 1}}),
        "space.lr",
        ["float, int, categorical"],
    ),
    "space_extra_key": (
        _with(space={"lr": {"type": "float", "low": 0.1, "high": 1, "lg": True}}),
        "space.lr.lg",
        ["type, low, high, log, step, grid"],
    ),
    "space_bound_rejected": (
        _with(space={"lr": {"type": "float", "low": -1, "high": 1}}),
        "space.lr",
        ["greater than 0", "-1"],
    ),
    "log_needs_positive": (
        _with(space={"lr": {"type": "float", "low": 0, "high": 1, "log": True}}),
        "space.lr.low",
        ["low > 0"],
    ),
    "low_above_high": (_with(space={"lr": {"type": "float", "low": 2, "high": 1}}), "space.lr", ["low 2.0 > high 1.0"]),
    "fixed_and_searched": (_with(params={"lr": 0.1}), "space.lr", ["both fixed"]),
    "bad_choice": (
        _with(space={"dtype": {"type": "categorical", "choices": ["float64", "float16"]}}),
        "space.dtype",
        ["float64, float32"],
    ),
    "variant_param": (_with(params={"lr_rule": "optimal"}), "space.lr", ["when lr_rule is 'optimal'"]),
    "unknown_metric": (
        _with(objective={"metric": "err_fin"}),
        "objective.metric",
        ["no metric 'err_fin'", "err_final", "flops"],
    ),
    "bad_direction": (
        _with(objective={"metric": "err_final", "direction": "min"}),
        "objective.direction",
        ["minimize, maximize"],
    ),
    "unknown_sampler": (_with(sampler="tpee"), "sampler", ["tpe, cmaes, gp, grid, random"]),
    "sampler_option": (
        _with(sampler={"name": "tpe", "options": {"n_startup": 3}}),
        "sampler.options",
        ["n_startup_trials"],
    ),
    "pruner_without_metric": (_with(pruner={"name": "median"}), "pruner.metric", ["err, loss"]),
    "pruner_bad_metric": (_with(pruner={"name": "median", "metric": "er"}), "pruner.metric", ["err, loss"]),
    "pruner_option": (
        _with(pruner={"name": "median", "metric": "err", "options": {"warmup": 3}}),
        "pruner.options",
        ["n_warmup_steps"],
    ),
    "two_objectives_pruned": (
        _with(objective=[{"metric": "err_final"}, {"metric": "flops"}], pruner={"name": "median", "metric": "err"}),
        "pruner.name",
        ["one objective"],
    ),
    "cmaes_two_objectives": (
        _with(objective=[{"metric": "err_final"}, {"metric": "flops"}], sampler="cmaes"),
        "sampler.name",
        ["one objective"],
    ),
    "grid_needs_points": (_with(sampler="grid"), "space.lr", ["`grid` list or a `step`"]),
    "no_trials": (_with(n_trials=None), "n_trials", ["number of trials"]),
    "baseline_param": (
        _with(baselines=[{"params": {"lr_rule": "optimal", "lr": None, "foo": 1}}]),
        "baselines.0.params.foo",
        ["does not take"],
    ),
    "sweep_overlap": (_with(sweep={"lr": [0.1]}), "sweep.lr", ["cannot also be"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_study_names_key_and_choices(case: str) -> None:
    raw, key, fragments = BAD[case]
    with pytest.raises(ConfigError) as info:
        load_study(raw)
    assert info.value.key == key, str(info.value)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_cli_rejects_bad_study_with_exit_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_with(objective={"metric": "err_fin"})))
    root = tmp_path / "results"
    assert main(["tune", str(path), "--results", str(root), "--executor", "local"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "objective.metric" in err and "valid choices" in err
    assert files_under(root) == []


def test_a_dry_run_writes_nothing_and_reads_what_the_storage_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--dry-run` runs nothing: on a root that does not exist it made the root and an empty journal."""
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(_with(n_trials=2)))
    root = tmp_path / "results" / "new"
    assert main(["tune", str(path), "--results", str(root), "--dry-run"]) == 0
    assert "new study" in capsys.readouterr().out and not (tmp_path / "results").exists()
    assert main(["tune", str(path), "--results", str(root), "--executor", "local", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["tune", str(path), "--results", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 trials already (" in out and "2 of 2 finished: nothing to run" in out, out
    # what is left to run, by state: a FAIL trial is not a finished one and is asked again
    assert main(["tune", str(path), "--results", str(root), "--dry-run", "--n-trials", "5"]) == 0
    assert "2 of 5 finished: 3 more to run" in capsys.readouterr().out


def test_sweep_makes_one_study_per_value_and_baselines_merge() -> None:
    raw = _with(sweep={"n_iters": [10, 20]}, baselines=[{"params": {"lr_rule": "optimal"}}], sampler={"name": "grid"})
    raw["params"].pop("n_iters")
    raw["space"] = {"lr": {"type": "float", "low": 0.1, "high": 0.3, "step": 0.1}}
    plans = load_study(raw)
    assert [p.name for p in plans] == ["ls[n_iters=10]", "ls[n_iters=20]"]
    assert [p.fixed["n_iters"] for p in plans] == [10, 20]
    assert all(p.n_trials == 3 for p in plans)  # a grid study's default budget is its grid
    assert [round(v, 12) for v in plans[0].grid()["lr"]] == [0.1, 0.2, 0.3]
    base = plans[1].baselines[0]
    assert base.params.model_dump()["lr_rule"] == "optimal" and base.params.model_dump()["n_iters"] == 20
    assert plans[0].baselines[0].run_id != base.run_id
    assert (
        plans[0].cell({"lr": 0.2}).run_id
        == load_study(_with(params={**GOOD["params"], "n_iters": 10}))[0].cell({"lr": 0.2}).run_id
    )


def test_ready_studies_validate() -> None:
    studies = sorted((Path(__file__).resolve().parent.parent / "studies").rglob("*.yaml"))
    assert studies, "no ready studies"
    for path in studies:
        assert load_study(path), path


# A bool where a number belongs: YAML's `true` is no count, bound or seed (pydantic's lax mode took it as
# 1). Every numeric field of the study file, and the numeric options of a sampler or pruner.
BOOL_FOR_NUMBER = {
    "n_trials": _with(n_trials=True),
    "parallel": _with(parallel=True),
    "batch": _with(batch=True),
    "max_failed": _with(max_failed=True),
    "sampler.seed": _with(sampler={"name": "tpe", "seed": True}),
    "sampler.options.n_startup_trials": _with(sampler={"name": "tpe", "options": {"n_startup_trials": True}}),
    "pruner.every": _with(pruner={"name": "median", "metric": "err", "every": True}),
    "pruner.options.n_warmup_steps": _with(
        pruner={"name": "median", "metric": "err", "options": {"n_warmup_steps": True}}
    ),
    "objective.nan_value": _with(objective={"metric": "err_final", "nan_value": True}),
    "space.lr.low": _with(space={"lr": {"type": "float", "low": True, "high": 1.0}}),
    "space.lr.step": _with(space={"lr": {"type": "float", "low": 0.1, "high": 1.0, "step": True}}),
    "space.lr.grid.0": _with(space={"lr": {"type": "float", "low": 0.1, "high": 1.0, "grid": [True]}}),
    "space.n_iters.high": _with(space={"n_iters": {"type": "int", "low": 1, "high": True}}),
}


@pytest.mark.parametrize("key", sorted(BOOL_FOR_NUMBER))
def test_a_bool_where_a_number_belongs_is_refused(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_study(BOOL_FOR_NUMBER[key])
    assert info.value.key == key, str(info.value)
    assert "True" in str(info.value) and "bool" in str(info.value)


def test_bools_stay_valid_where_they_belong() -> None:
    # a log flag is one, and so is a sampler's boolean option
    (plan,) = load_study(
        _with(
            objective={"metric": "err_final", "log": True},
            sampler={"name": "tpe", "options": {"multivariate": True, "constant_liar": False}},
        )
    )
    assert plan.objectives[0].log is True and plan.sampler.options["multivariate"] is True


def test_a_dry_run_counts_failed_trials_apart_from_finished_ones() -> None:
    """`22 trials already` counted FAIL trials (and a killed driver's WAITING ones) as if done."""
    from collections import Counter

    from runner.cli.tune import _progress

    line = _progress(Counter({"COMPLETE": 12, "PRUNED": 4, "FAIL": 5, "WAITING": 1}), 20)
    assert line == "22 trials already (COMPLETE 12, FAIL 5, PRUNED 4, WAITING 1); 16 of 20 finished: 4 more to run"
