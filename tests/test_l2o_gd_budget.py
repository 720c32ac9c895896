"""l2o_gd's budget rule (issue 29) on curves with closed forms: r_T(k) = 0.9 - 0.5 / sqrt(k) rises ever more
slowly, so its slope over the last fifth and the linear continuation to 50,000 epochs are known exactly; a claim
short of the paper's budget is decided only when that continuation settles it. The rule is symmetric (issue 43):
a win inside the undecided band the problem draws' spread justifies is no more a win than such a loss is a loss,
one draw decides nothing, and the learner's lr is chosen on the draws it is not judged on."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.claims import FAILS, HOLDS, UNDECIDED, paired_verdict
from analysis.l2o_gd.budget import PAPER_EPOCHS, decide, held_out_pairs, ladder_table, r_t_curve, trend


def _curve(f: object, epochs: int = 5000, every: int = 50) -> pd.Series:
    k = np.arange(every, epochs + 1, every, dtype=float)
    return pd.Series([f(x) for x in k], index=k)  # type: ignore[operator]


def concave(k: float) -> float:
    return 0.9 - 0.5 / math.sqrt(k)


def test_trend_of_a_concave_curve_against_its_closed_form() -> None:
    tr = trend(_curve(concave))
    assert tr is not None and tr.epochs == 5000 and tr.final == concave(5000)
    slope = (concave(5000) - concave(4000)) / 1000 * 100
    assert tr.slope == pytest.approx(slope, rel=1e-12) and tr.previous > tr.slope and tr.concave
    assert tr.reach == pytest.approx(concave(5000) + slope * (PAPER_EPOCHS - 5000) / 100, rel=1e-12)
    assert 0.93 < tr.reach < 0.931  # 0.8929 + 8.35e-5 x 450


def test_decide_settles_only_what_the_trend_settles() -> None:
    tr = trend(_curve(concave))
    assert tr is not None
    assert decide(tr, 0.85, 0.01) == HOLDS  # above by more than the band
    assert decide(tr, 0.95, 0.01) == FAILS  # even its current rate continued to 50,000 epochs stays below
    assert decide(tr, 0.92, 0.001) == UNDECIDED  # that continuation would pass it: the budget cannot tell
    accelerating = trend(_curve(lambda k: 0.5 + 1e-10 * k**2))  # convex: no line bounds it from above
    assert accelerating is not None and not accelerating.concave
    assert decide(accelerating, 0.999, 0.001) == UNDECIDED
    at_budget = trend(_curve(concave, epochs=PAPER_EPOCHS, every=1000))
    assert at_budget is not None and decide(at_budget, 0.95, 0.01) == FAILS and decide(at_budget, 0.92, 0.01) == FAILS


def test_decide_is_symmetric_about_the_baseline() -> None:
    """A win by less than the band is undecided exactly as a loss by less than it is, even at the paper's budget
    (issue 43: 0.9045 against 0.9042 was called a win); with one draw (an infinite band) nothing is decided."""
    at_budget = trend(_curve(concave, epochs=PAPER_EPOCHS, every=1000))
    assert at_budget is not None
    final = at_budget.final
    for band in (0.01, 0.001):
        assert decide(at_budget, final - 0.5 * band, band) == UNDECIDED  # a win inside the band
        assert decide(at_budget, final + 0.5 * band, band) == UNDECIDED  # a loss inside it
        assert decide(at_budget, final - 2 * band, band) == HOLDS
        assert decide(at_budget, final + 2 * band, band) == FAILS
    assert decide(at_budget, 0.0, math.inf) == UNDECIDED and decide(at_budget, 1.0, math.inf) == UNDECIDED


def test_paired_verdict_needs_draws_and_a_margin_both_ways() -> None:
    """The paired rule from closed-form samples: mean m, sd s over n draws, band 2 s / sqrt(n)."""
    one = paired_verdict([0.0003])
    assert one[0] == UNDECIDED and "problem draws: 1 of the 5" in one[2]  # one draw, infinite spread
    win, loss = [0.05, 0.06, 0.07], [-0.05, -0.06, -0.07]  # mean +-0.06, sd 0.01: far beyond 2 sd
    assert paired_verdict(win)[0] == HOLDS and paired_verdict(loss)[0] == FAILS
    close = [0.01, -0.005, 0.02]  # mean 0.0083 within twice its spread: 5 draws are needed
    assert paired_verdict(close)[0] == UNDECIDED and "of the 5" in paired_verdict(close)[2]
    noisy = [0.03, -0.02, 0.04, -0.01, 0.0]  # five draws, mean 0.008, band 2 x 0.0259 / sqrt 5 = 0.023
    verdict, measured, lacks = paired_verdict(noisy)
    assert verdict == UNDECIDED and "+-0.0232" in lacks and "mean +0.008" in measured
    assert paired_verdict([-x for x in noisy])[0] == UNDECIDED  # the mirror image is undecided too


def test_the_lr_is_chosen_on_the_other_draws() -> None:
    """Each draw's lr is the best on the other draws: a lr that wins only on the draw it is judged on is not
    picked for it (issue 43: the lr had been picked on the very problem compared)."""
    runs = pd.DataFrame(
        {
            "seed": [0, 0, 1, 1, 2, 2],
            "lr": [1e-6, 1e-7] * 3,
            "run_id": list("abcdef"),
            # over all three draws 1e-6 wins (median 0.85 vs 0.81), but on seeds 1 and 2 alone it loses
            "imp_last": [0.95, 0.80, 0.85, 0.81, 0.60, 0.82],
            "imp_last_opt": [0.75] * 6,
        }
    )
    pairs = held_out_pairs(runs, "imp_last_opt").set_index("seed")
    assert pairs["lr"].tolist() == [1e-7, 1e-7, 1e-6] and pairs.loc[0, "learner"] == 0.80
    assert pairs["held_out"].all() and (pairs["baseline"] == 0.75).all()


def test_ladder_table_reads_the_rungs_off_the_curve() -> None:
    curve = _curve(concave, epochs=1200)
    curves = pd.DataFrame(
        {
            "run_id": "r",
            "step": [0.0, *curve.index],
            "imp_last_t": [0.0, *curve],
            "imp_mean_t": [0.0, *(curve / 2)],
        }
    )
    runs = pd.DataFrame({"run_id": ["r"], "lr": [1e-6], "seed": [0], "imp_last_opt": [0.9], "imp_last_best_c": [0.91]})
    assert r_t_curve(curves, "r").index.min() == 50  # epoch 0 left out
    table = ladder_table(runs, curves, tuned={"r": 0.92})
    assert list(table["epoch"]) == [100, 500, 1000]  # the rungs the run reached
    assert table["r_T"].tolist() == [concave(100), concave(500), concave(1000)]
    assert table["mean_t r_t"].tolist() == [concave(100) / 2, concave(500) / 2, concave(1000) / 2]
    assert (table["r_T Optuna-tuned c"] == 0.92).all() and (table["r_T 2/(beta+beta0)"] == 0.9).all()
