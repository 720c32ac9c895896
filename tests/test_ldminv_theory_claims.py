"""ldminv's theorem checks on their small grids, inside the theorems' hypotheses and (Thm 1) outside them,
asserting what the theorem states: Lemma 2's sign and order, Thm 1's rate (issue 29)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis.claims import FAILS, HOLDS, evaluate
from analysis.ldminv.claims import CLAIMS
from analysis.ldminv.frames import coeffs
from analysis.ldminv.theory_checks import _quarter_rates
from analysis.load import curves, load
from runner.run.grid_run import run_grid
from tests.options import opts

SMALL = Path(__file__).resolve().parents[1] / "grids" / "ldminv" / "small"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("ldminv_theory") / "res")
    for name in ("theory_lemma2", "theory_thm1"):
        run_grid(SMALL / f"{name}.yaml", root, opts())
    return root


def _verdicts(root: str, prefix: str) -> dict[str, str]:
    table = evaluate(root, [c for c in CLAIMS if c.id.startswith(prefix)])
    return {r.claim.id: r.verdict.verdict for r in table.results}


def test_lemma2_inside_its_hypotheses(store: str) -> None:
    runs = load(store, "ldminv", grid="small_theory_lemma2")
    assert len(runs) == 2 and set(runs["L"]) == {4, 5} and (runs["k_warm"] == 0).all()
    assert (runs["e0_max"] > 0.98).all()  # e0 ~ 0.99: e_K = e0^(L^K) stays far above rounding
    assert (runs["grad_init_max"] < 0).all()  # every dL/dC_k < 0 at C = 0
    order, depth = runs["order_empirical"].to_numpy(), runs["L"].to_numpy()
    assert ((order > depth) & (order <= depth + 1)).all()  # the raised order, in (L, L+1]
    first = np.array([coeffs(c)[0] for c in runs["coeffs_json"]])
    assert (first > 3).all()  # ... while C_1 overshoots far past 1: the "C_k -> 1" part fails
    assert _verdicts(store, "000.lemma2") == {
        "000.lemma2.gradient": HOLDS,
        "000.lemma2.order": HOLDS,
        "000.lemma2.c_to_one": FAILS,
    }


def test_thm1_is_a_rate_inside_and_decelerates_outside(store: str) -> None:
    runs = load(store, "ldminv", grid="small_theory_thm1")
    rates = _quarter_rates(curves(store, "ldminv", runs=runs), runs).merge(runs, on="run_id").set_index("rows")
    inside, outside = rates.loc[2], rates.loc[6]
    assert inside["K"] >= inside["n_train"] * 2 and outside["K"] < outside["n_train"] * 6
    # inside: the same factor per 1000 steps in the second and the last quarter (a straight line in log L_n),
    # and a real one (the run's: 0.897)
    assert inside["f4"] == pytest.approx(inside["f2"], rel=1e-3) and inside["f4"] < 0.95
    # outside (K < n d): the last quarter decays at less than half the second quarter's log-rate
    assert np.log(outside["f4"]) > 0.5 * np.log(outside["f2"])
    assert _verdicts(store, "000.thm1") == {"000.thm1.linear": HOLDS, "000.thm1.practice": FAILS}


def test_lemma1_is_decided_at_float64_rounding_not_below_it() -> None:
    """Lemma 1 is an identity: rounding-level absolute errors hold it whatever e_k they are relative to
    (the measured worst, 9e-15 absolute at e_k ~ 5e-7, is 1.8e-8 relative); an error above rounding fails."""
    import pandas as pd

    from analysis.ldminv.theory_checks import lemma1_exact

    def frame(abs_err: float, rel_err: float) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "run_id": ["a"],
                "status": ["ok"],
                "algo": ["minv"],
                "dtype": ["float64"],
                "lemma1_max_abs_err": [abs_err],
                "lemma1_max_rel_err": [rel_err],
            }
        )

    assert lemma1_exact(frame(9.1e-15, 1.8e-8), None).verdict == HOLDS
    assert lemma1_exact(frame(4.2e-13, 5e-12), None).verdict == HOLDS
    assert lemma1_exact(frame(1e-10, 1e-3), None).verdict == FAILS  # above rounding: a real deviation
    assert lemma1_exact(frame(9e-15, 1e-4), None).verdict == FAILS  # relative error no rounding explains
