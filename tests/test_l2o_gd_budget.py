"""l2o_gd's budget rule (issue 29) on curves with closed forms: r_T(k) = 0.9 - 0.5 / sqrt(k) rises ever more
slowly, so its slope over the last fifth and the linear continuation to 50,000 epochs are known exactly; a claim
short of the paper's budget is decided only when that continuation settles it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.claims import FAILS, HOLDS, UNDECIDED
from analysis.l2o_gd.budget import PAPER_EPOCHS, decide, ladder_table, r_t_curve, trend


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
    assert decide(tr, 0.85) == HOLDS  # already above
    assert decide(tr, 0.95) == FAILS  # even its current rate continued to 50,000 epochs stays below
    assert decide(tr, 0.92) == UNDECIDED  # that continuation would pass it: the budget cannot tell
    accelerating = trend(_curve(lambda k: 0.5 + 1e-10 * k**2))  # convex: no line bounds it from above
    assert accelerating is not None and not accelerating.concave
    assert decide(accelerating, 0.999) == UNDECIDED
    at_budget = trend(_curve(concave, epochs=PAPER_EPOCHS, every=1000))
    assert at_budget is not None and decide(at_budget, 0.95) == FAILS and decide(at_budget, 0.92) == FAILS


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
