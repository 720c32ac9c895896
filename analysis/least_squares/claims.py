"""Claims of constant-step GD on least squares, decided from the theory each run records
(lambda_max, lambda_min of X X^T and the best constant step 2/(lambda_max + lambda_min))."""

from __future__ import annotations

import pandas as pd

from analysis.claims import FAILS, HOLDS, NO_DATA, Claim, Verdict, fmt, medians


def _threshold(runs: pd.DataFrame, curves: pd.DataFrame | None) -> Verdict:
    const = runs[runs["lr_rule"] == "const"]
    if const.empty:
        return Verdict(NO_DATA, "no constant-step runs")
    above = const["lr"] * const["lambda_max"] > 2
    wrong = const[above != (const["status"] == "diverged")]
    measured = f"{int(above.sum())} runs above 2/lambda_max, {int((const['status'] == 'diverged').sum())} diverged"
    return Verdict(HOLDS if wrong.empty else FAILS, measured, theory="GD diverges iff lr > 2/lambda_max")


def _optimal_best(runs: pd.DataFrame, curves: pd.DataFrame | None) -> Verdict:
    ok = runs[runs["status"] == "ok"]
    if ok.empty or "optimal" not in set(ok["lr_rule"]):
        return Verdict(NO_DATA, "no converged optimal-step runs")
    rule = ok["lr_rule"].where(ok["lr_rule"] == "optimal", "lr " + ok["lr"].map("{:g}".format))
    final = medians(ok.assign(rule=rule), ["rule"], "err_final", never=None)
    best = final.idxmin()
    return Verdict(
        HOLDS if best == "optimal" else FAILS,
        f"median final error by step: {fmt(final)}",
        theory="2/(lambda_max + lambda_min) minimises the worst-case contraction factor",
    )


CLAIMS = [
    Claim(
        "lsq.divergence_threshold",
        "-",
        "least_squares",
        ("lsq_step_sweep",),
        "constant-step GD diverges exactly when lr > 2/lambda_max",
        _threshold,
    ),
    Claim(
        "lsq.optimal_step_best",
        "-",
        "least_squares",
        ("lsq_step_sweep",),
        "the step 2/(lambda_max + lambda_min) beats every step of the sweep",
        _optimal_best,
    ),
]
