"""A list-valued param searched element-wise (`type: float_vector` in a study file): validated like
any other space entry, sampled as named elements, handed to the task as one list, stored as a list
column, and CMA-ES centred on the vector's `start`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.errors import ConfigError
from runner.store import ResultStore
from runner.store.trials import read_trials
from runner.tune.driver import tune
from runner.tune.optuna_adapter import load_plans
from runner.tune.optuna_plan import distributions, make_sampler
from tests.options import opts

STUDY = {
    "name": "vec",
    "task": "faulty",
    "params": {"x": 0.0},
    "space": {"weights": {"type": "float_vector", "size": 3, "low": -2.0, "high": 3.0, "start": 0.0}},
    "objective": {"metric": "square"},
    "sampler": {"name": "cmaes", "seed": 0},
    "n_trials": 24,
    "parallel": 2,
}


def test_a_vector_is_sampled_as_elements_and_run_as_one_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna.samplers

    plan = load_plans(STUDY)[0]
    assert sorted(distributions(plan)) == ["weights[0]", "weights[1]", "weights[2]"]
    made: dict[str, object] = {}  # the options CMA-ES is built with (its x0 is kept in a private field)
    monkeypatch.setattr(optuna.samplers, "CmaEsSampler", lambda **options: made.update(options))
    make_sampler(plan)
    monkeypatch.undo()
    assert made["x0"] == {"weights[0]": 0.0, "weights[1]": 0.0, "weights[2]": 0.0}
    cell = plan.cell({"weights[0]": 0.5, "weights[1]": 1.0, "weights[2]": 2.0})
    assert cell.params.weights == [0.5, 1.0, 2.0]

    [report] = tune(STUDY, tmp_path, opts())
    trials = read_trials(ResultStore(tmp_path), "vec").to_pylist()
    assert len(trials) == 24 and {t["state"] for t in trials} == {"COMPLETE"}
    assert set(json.loads(trials[0]["params_json"])) == {"weights[0]", "weights[1]", "weights[2]"}
    runs = ResultStore(tmp_path).read_runs("faulty").to_pandas()
    assert all(len(w) == 3 for w in runs["weights"])  # one list column, not three
    # the objective is sum((w - 1)^2): CMA-ES from the start (value 3) must get well below it
    assert min(t["value"] for t in trials) < 0.5
    by_run = {r["run_id"]: r for r in runs.to_dict("records")}
    for t in trials:  # every trial's value is its run's metric, computed from the assembled list
        w = by_run[t["run_id"]]["weights"]
        assert t["value"] == pytest.approx(sum((v - 1.0) ** 2 for v in w))


@pytest.mark.parametrize(
    ("change", "key", "text"),
    [
        ({"start": [0.0, 0.0]}, "space.weights.start", "start has 2 values, size is 3"),
        ({"start": 9.0}, "space.weights.start", "start values must lie in"),
        ({"low": 4.0}, "space.weights", "low 4.0 > high 3.0"),
        ({"size": 0}, "space.weights.size", "greater than or equal to 1"),
    ],
)
def test_bad_vectors_are_refused_with_the_key(change: dict[str, object], key: str, text: str) -> None:
    raw = {**STUDY, "space": {"weights": {**STUDY["space"]["weights"], **change}}}
    with pytest.raises(ConfigError) as err:
        load_plans(raw)
    assert err.value.key == key and text in str(err.value)


def test_the_grid_sampler_refuses_a_vector() -> None:
    with pytest.raises(ConfigError) as err:
        load_plans({**STUDY, "sampler": {"name": "grid"}})
    assert "cannot search a float_vector" in str(err.value)
