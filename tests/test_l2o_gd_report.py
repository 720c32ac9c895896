"""l2o_gd: the learner against the Optuna-tuned constant step (issue 14's last item). A tiny store holds the
small_main grid (the learner, seeds 0 and 1) and the real gd_step study file shrunk to those problems (one study
per seed, a few trials): `evaluate` decides 001.g4.beats_tuned_step from both sources, every number of its table
equals one read another way (the tuner's own best trials, the study's 2/(beta+beta0) baseline runs), and
`convgrid report` shows the comparison in the grid's section and the claim in the claims table."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.claims import NO_DATA, UNDECIDED, ClaimResult, evaluate, extra_sources, finished_runs, named
from analysis.l2o_gd.claims import CLAIMS
from analysis.l2o_gd.tuned_step import STEP_COLUMN, TUNED_STEP_STUDIES, beats_tuned_step
from analysis.load import load
from analysis.report import build_report
from runner.run.grid_run import run_grid
from runner.tune import tune
from runner.tune.trials import TuneReport
from tests.options import opts

ROOT = Path(__file__).resolve().parents[1]
SMALL_MAIN = ROOT / "grids" / "l2o_gd" / "small" / "main.yaml"
CLAIM = next(c for c in CLAIMS if c.id == "001.g4.beats_tuned_step")
SEEDS = (0, 1)


def _small_study() -> dict[str, Any]:
    """studies/l2o_gd/gd_step.yaml (its name, space, objective, baselines) on small_main's problems."""
    study: dict[str, Any] = yaml.safe_load((ROOT / "studies" / "l2o_gd" / "gd_step.yaml").read_text())
    small = yaml.safe_load(SMALL_MAIN.read_text())["blocks"][0]["params"]
    shape = {k: small[k] for k in ("d", "b", "n_problems", "T")}
    study["params"] = {**study["params"], **shape}
    study["sweep"] = {"seed": list(SEEDS)}
    return study


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[TuneReport]]:
    root = str(tmp_path_factory.mktemp("l2o_report") / "res")
    run_grid(SMALL_MAIN, root, opts())
    reports = tune(_small_study(), root, opts(), n_trials=4, parallel=1)
    return root, reports


def _result(root: str) -> ClaimResult:
    (result,) = evaluate(root, [CLAIM]).results
    return result


def test_claim_compares_the_learner_with_the_best_tuned_trial_of_each_seed(
    store: tuple[str, list[TuneReport]],
) -> None:
    root, reports = store
    result = _result(root)
    assert result.grid == "small_main" and result.complete
    assert result.extra == ("l2o_gd_gd_step[seed=0]", "l2o_gd_gd_step[seed=1]")  # the swept study's two studies
    assert result.sources == "small_main + l2o_gd_gd_step[seed=0] + l2o_gd_gd_step[seed=1]"

    learner = load(root, "l2o_gd", grid="small_main").set_index("seed").sort_index()
    assert list(learner.index) == list(SEEDS)
    # the tuner's own answer: its best trial per study (smallest objective), the run it stored
    best = {int(r.study.split("=")[1].rstrip("]")): r.best[0] for r in reports}
    tuned_runs = load(root, "l2o_gd", filters={"run_id": [b["run_id"] for b in best.values()]}).set_index("seed")
    assert sorted(tuned_runs.index) == list(SEEDS) and set(tuned_runs["step_rule"]) == {"given"}
    for seed, b in best.items():
        assert tuned_runs.loc[seed, "c"] == b["params"]["c"]
    # the study's own baseline run of 2/(beta+beta0) on the same problems: an independent GD run
    two_over = load(root, "l2o_gd", filters={"algo": "gd", "step_rule": "two_over"}).set_index("seed").sort_index()

    table = result.verdict.table
    assert table is not None
    rows = table.set_index(STEP_COLUMN)
    learner_r = learner["imp_last"].median()
    tuned_r = tuned_runs["imp_last"].median()
    assert rows.loc["L2O, learned P (mean at the end)", "r_T"] == learner_r
    assert rows.loc["L2O, learned P (mean at the end)", "F(X_T)"] == learner["F_T_final"].median()
    tuned_row = rows.loc["GD, Optuna-tuned c (l2o_gd_gd_step[seed=0], l2o_gd_gd_step[seed=1])"]
    assert tuned_row["r_T"] == tuned_r
    assert tuned_row["c (times 1/beta)"] == tuned_runs["c"].median()
    assert tuned_row["F(X_T)"] == tuned_runs["F_T_final"].median()
    assert tuned_row["mean_t r_t"] == tuned_runs["imp_mean"].median()
    gd_row = rows.loc["GD, 1/beta (the paper's baseline)"]
    assert (gd_row["c (times 1/beta)"], gd_row["r_T"], gd_row["mean_t r_t"]) == (1.0, 0.0, 0.0)
    assert gd_row["F(X_T)"] == pytest.approx(two_over["F_T_gd"].median(), rel=1e-12)
    # the learner's stored 2/(beta+beta0) baseline is the study's baseline run, computed apart
    opt = rows.loc["GD, 2/(beta+beta0)"]
    assert opt["r_T"] == pytest.approx(two_over["imp_last"].median(), rel=1e-12)
    assert opt["c (times 1/beta)"] == pytest.approx(two_over["step_c"].median(), rel=1e-12)

    # 6 epochs of the paper's 50,000: the learner is below the tuned step and its r_T still rises, so the
    # verdict is undecided at this budget, with the budget and the trend in the row (analysis/l2o_gd/budget.py)
    assert learner_r < tuned_r
    assert result.verdict.verdict == UNDECIDED and result.verdict.budget == "6 of the paper's 50000 epochs"
    assert "median over draws: r_T" in result.verdict.measured and "rising +" in result.verdict.measured
    assert not result.surprising  # expected undecided: only a 50,000-epoch run can decide it
    # issue 43: paired per draw (2 here: fewer than the 3 a drawn problem needs), the medians beside
    assert "r_T L2O - r_T Optuna-tuned c over 2 paired draw(s)" in result.verdict.measured
    assert f"medians r_T learner {learner_r:.4f}, baseline {tuned_r:.4f}" in result.verdict.measured
    assert f"Optuna-tuned c = {tuned_runs['c'].median():.4g}" in result.verdict.measured
    assert result.lacks.startswith("problem draws: 2 of the")
    assert "without a tuned trial" not in result.verdict.measured  # every learner seed has its study

    # each learner run is paired with the tuned trial of its own problems (medians over two would hide a swap)
    runs = finished_runs(root, "l2o_gd", ["small_main", *result.extra])
    for seed in SEEDS:
        alone = beats_tuned_step(runs[runs["grid"].isin(["small_main", f"l2o_gd_gd_step[seed={seed}]"])], None)
        assert alone.table is not None
        one = alone.table.set_index(STEP_COLUMN)["r_T"]
        assert one.iloc[0] == learner.loc[seed, "imp_last"] and one.iloc[-1] == tuned_runs.loc[seed, "imp_last"]
        assert one.iloc[2] == pytest.approx(two_over.loc[seed, "imp_last"], rel=1e-12)


def test_absent_study_is_not_enough_data_naming_it(store: tuple[str, list[TuneReport]]) -> None:
    root, _ = store
    only_reference = dataclasses.replace(CLAIM, extra=("l2o_gd_gd_step_reference",))
    (result,) = evaluate(root, [only_reference]).results
    assert result.grid == "small_main" and result.extra == ()
    assert result.verdict.verdict == NO_DATA and result.verdict.table is None
    assert "l2o_gd_gd_step_reference" in result.verdict.measured


def test_a_study_on_other_problems_is_not_enough_data(store: tuple[str, list[TuneReport]]) -> None:
    root, _ = store
    result = _result(root)
    runs = finished_runs(root, "l2o_gd", ["small_main", *result.extra])
    other = runs.assign(seed=runs["seed"].where(runs["grid"] == "small_main", 7))  # the study tuned seed 7 only
    verdict = beats_tuned_step(other, None)
    assert verdict.verdict == NO_DATA and verdict.table is None
    assert "16x10, N=4, gauss, seed 0; 16x10, N=4, gauss, seed 1" in verdict.measured  # the learner's problems
    assert "the studies cover: 16x10, N=4, gauss, seed 7" in verdict.measured
    # a learner run whose problems have no tuned trial is left out of the medians and said so
    one = runs[~((runs["grid"] != "small_main") & (runs["seed"] == 1))]
    partial = beats_tuned_step(one, None)
    assert partial.verdict == UNDECIDED and "over 1 paired draw(s)" in partial.measured
    assert "1 learner run(s) at those lrs without a tuned trial" in partial.measured


def test_extra_names_a_swept_study_by_its_file_name() -> None:
    present = {"l2o_gd_gd_step[seed=0]", "l2o_gd_gd_step[seed=12]", "l2o_gd_gd_step_reference", "reference"}
    assert extra_sources(CLAIM, present) == sorted(present - {"reference"})
    assert named("l2o_gd_gd_step_reference", ("l2o_gd_gd_step",)) is False  # a longer name is another study
    assert named("l2o_gd_gd_step[seed=0]", TUNED_STEP_STUDIES) and not named("l2o_gd_gd_steps", TUNED_STEP_STUDIES)


def test_report_shows_the_comparison_in_the_grid_section(store: tuple[str, list[TuneReport]], tmp_path: Path) -> None:
    root, _ = store
    result = _result(root)
    table = result.verdict.table
    assert table is not None
    report = build_report(root, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    section = text.split("## small_main (l2o_gd)")[1].split("\n## ")[0]
    assert "001.g4.beats_tuned_step (" in section
    assert f"| {STEP_COLUMN} | c (times 1/beta) | r_T | mean_t r_t | F(X_T) |" in section
    tuned = table.iloc[-1]
    assert f"| {tuned['r_T']:.4g} | {tuned['mean_t r_t']:.4g} | {tuned['F(X_T)']:.4g} |" in section
    assert "| GD, best c of the run's scan |" in section and section.count("\n| ") == 1 + len(table)
    claims = text.split("## Claims")[1]
    assert (
        "| 001.g4.beats_tuned_step | small_main + l2o_gd_gd_step\\[seed=0\\] + l2o_gd_gd_step\\[seed=1\\] |" in claims
    )
    assert any(r.claim.id == CLAIM.id and r.grid == "small_main" for r in report.claims.results)
    # no other section carries it: a study's own section has no table of this claim
    assert text.count(f"| {STEP_COLUMN} |") == 1
