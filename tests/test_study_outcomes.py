"""A study's intermediate values drawn by outcome (issue 45): every trial that reported is drawn in the
colour of how it ended (complete, pruned, diverged, failed), its last report marked, and the legend
counts each outcome; Optuna's own plot was 30 lines in a repeating colour cycle with no legend."""

from __future__ import annotations

import optuna
import pytest

from analysis.studies import OUTCOME_STYLE, intermediate_by_outcome, outcome


def _study() -> optuna.Study:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="s")
    for number, (state, steps) in enumerate(
        [("COMPLETE", 4), ("COMPLETE", 4), ("PRUNED", 2), ("PRUNED", 2), ("FAIL", 1), ("COMPLETE", 0)]
    ):
        trial = study.ask()
        for step in range(steps):
            trial.report(1.0 / (step + 1 + number), step)
        kind = getattr(optuna.trial.TrialState, state)
        study.tell(trial, 0.1 if kind == optuna.trial.TrialState.COMPLETE else None, state=kind)
    return study


@pytest.mark.parametrize(
    ("state", "run_status", "expected"),
    [
        ("COMPLETE", "ok", "complete"),
        ("PRUNED", "pruned", "pruned"),
        ("PRUNED", "diverged", "diverged"),
        ("FAIL", None, "failed"),
        ("RUNNING", None, "failed"),
    ],
)
def test_outcome(state: str, run_status: str | None, expected: str) -> None:
    assert outcome(state, run_status) == expected


def test_intermediate_values_are_coloured_and_counted_by_outcome() -> None:
    ax = intermediate_by_outcome(_study(), {3: "diverged"}, "log10 err")
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["complete (2)", "pruned (1)", "diverged (1)", "failed (1)"]
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata()) > 1 or ln.get_marker() not in ("None", "")]
    marks = [ln for ln in ax.get_lines() if ln.get_linestyle() == "None"]
    assert len(marks) == 5  # the trial that never reported is not drawn; the others end in their outcome's mark
    assert sorted(str(m.get_marker()) for m in marks) == sorted(["o", "o", "|", "x", "s"])
    for mark in marks:
        kind = next(k for k, look in OUTCOME_STYLE.items() if look["marker"] == mark.get_marker())
        assert mark.get_color() == OUTCOME_STYLE[kind]["color"]
    assert lines and ax.get_ylabel() == "log10 err" and ax.get_xlabel() == "step"


def test_the_console_names_each_baselines_params() -> None:
    """`convgrid tune` names a baseline by what sets it apart from the trials, not by its run id alone."""
    from pathlib import Path

    from runner.tune.driver import baseline_params
    from runner.tune.spec import load_study
    from runner.tune.trials import TuneReport

    (plan,) = load_study(Path(__file__).resolve().parents[1] / "studies" / "deep_linear" / "gd_step.yaml")
    assert [baseline_params(plan, c) for c in plan.baselines] == [{"algo": "bcgd"}, {"algo": "bcgd", "n_iters": 17000}]
    report = TuneReport(
        "s",
        "journal",
        1,
        baselines=[{"run_id": "ab", "status": "ok", "params": {"algo": "bcgd"}, "metrics": {"err_final": 0.5}}],
    )
    assert 'baseline run ab (ok) params {"algo": "bcgd"}: err_final=0.5' in report.format()
