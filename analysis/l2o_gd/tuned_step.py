"""The learner against the Optuna-tuned constant GD step (issue 14): each learner run (Gaussian data, e = 100,
at the learning rate of the grid that does best) is paired with the best trial of the tuned-step studies on the
very same problems, and the comparison table of `convgrid report` is built from those pairs. Short of the
paper's 50,000 epochs the verdict follows the r_T trend (analysis/l2o_gd/budget.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.claims import NO_DATA, Verdict, named
from analysis.l2o_gd.budget import budget_text, decide_paired, held_out_pairs
from analysis.l2o_gd.runs import only

# The studies tuning the constant GD step c/beta (studies/l2o_gd/gd_step.yaml, one study per seed, and
# gd_step_reference.yaml); a tuned trial is compared with the learner on the very same problems.
TUNED_STEP_STUDIES = ("l2o_gd_gd_step", "l2o_gd_gd_step_reference")
# What fixes the problems a run solves (and so its baselines): equal values, equal F_t of GD with 1/beta.
PROBLEM = ["d", "b", "n_problems", "data", "seed", "data_seed", "T"]
STEP_COLUMN = "step (medians over the paired problems)"  # the comparison table's first column


def _problems(runs: pd.DataFrame) -> str:
    parts = runs[PROBLEM].drop_duplicates().sort_values(PROBLEM)
    return "; ".join(f"{r.d}x{r.b}, N={r.n_problems}, {r.data}, seed {r.seed}" for r in parts.itertuples())


def tuned_step_pairs(runs: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(the learner's runs at e = 100 on Gaussian data, the best tuned-step trial of each problem, their pairs):
    the learner from the claim's grid, the trials (GD with a given c) from the tuned-step studies, the best
    by the studies' objective F(X_T) (the smallest), paired on PROBLEM. Pair columns: the learner's, and the
    trial's imp_last, imp_mean, F_T_final, c and grid suffixed `_tuned`."""
    study = runs["grid"].map(lambda g: named(g, TUNED_STEP_STUDIES)).astype(bool)
    learner = only(runs[~study], data="gauss", e=100.0).drop_duplicates("run_id")
    gd = runs[study & (runs["algo"] == "gd") & (runs["status"] == "ok")]
    trials = gd[gd["step_rule"] == "given"].sort_values("F_T_final")
    best = trials.drop_duplicates(PROBLEM)  # the best trial over every study that solved the problem
    tuned = best[[*PROBLEM, "c", "imp_last", "imp_mean", "F_T_final", "grid"]]
    pairs = learner.merge(tuned, on=PROBLEM, suffixes=("", "_tuned"))  # pandas pairs NaN keys (default data_seed)
    return learner, best, pairs


def _comparison_table(pairs: pd.DataFrame) -> pd.DataFrame:
    """Learner and constant steps on the paired problems, medians over them: what the report shows."""
    med = pairs.median(numeric_only=True)
    rows = [
        ("L2O, learned P (mean at the end)", med["p_mean_final"], med["imp_last"], med["imp_mean"], med["F_T_final"]),
        ("GD, 1/beta (the paper's baseline)", 1.0, 0.0, 0.0, med["F_T_gd"]),
        ("GD, 2/(beta+beta0)", med["c_opt"], med["imp_last_opt"], med["imp_mean_opt"], med["F_T_opt"]),
        ("GD, best c of the run's scan", med["c_best"], med["imp_last_best_c"], med["imp_mean_best_c"], np.nan),
        (
            f"GD, Optuna-tuned c ({', '.join(sorted(set(pairs['grid_tuned'])))})",
            med["c_tuned"],
            med["imp_last_tuned"],
            med["imp_mean_tuned"],
            med["F_T_final_tuned"],
        ),
    ]
    return pd.DataFrame(rows, columns=[STEP_COLUMN, "c (times 1/beta)", "r_T", "mean_t r_t", "F(X_T)"])


def beats_tuned_step(runs: pd.DataFrame, curves: pd.DataFrame | None) -> Verdict:
    learner, best, pairs = tuned_step_pairs(runs)
    if learner.empty or "imp_last" not in learner:
        return Verdict(NO_DATA, "no l2o runs at e = 100 on Gaussian data")
    if pairs.empty:
        covered = _problems(best) if not best.empty else "none (no finished tuned trial)"
        return Verdict(
            NO_DATA,
            f"no tuned-step trial on the learner's problems ({_problems(learner)}); the studies cover: {covered}. "
            "Tune them with studies/l2o_gd/gd_step_reference.yaml (32x20) or gd_step.yaml (512x400)",
        )
    # the learner at the lr that does best on the other draws; the pairs' own columns, renamed for the rule
    held = held_out_pairs(pairs, "imp_last_tuned")
    pairs = pairs[pairs["run_id"].isin(held["run_id"])]
    med = pairs.median(numeric_only=True)
    epochs = int(pairs["epochs"].max())
    at_lr = learner[learner["lr"].isin(held["lr"])]
    unpaired = at_lr["run_id"].nunique() - pairs["run_id"].nunique()
    verdict, measured, lacks, trend_text = decide_paired(held, curves, epochs, "r_T L2O - r_T Optuna-tuned c")
    return Verdict(
        verdict,
        f"{measured}; Optuna-tuned c = {med['c_tuned']:.4g} (median; 2/(beta+beta0) r_T {med['imp_last_opt']:.3f}, "
        f"1/beta 0); mean_t r_t L2O {med['imp_mean']:.3f} vs {med['imp_mean_tuned']:.3f} on {_problems(pairs)}"
        + trend_text
        + (f"; {unpaired} learner run(s) at those lrs without a tuned trial on their problems" if unpaired else ""),
        theory="spec section 7 [ours], 32/20, N=8: the best constant c = 1.949 gives r_T 0.971 on its draw",
        table=_comparison_table(pairs),
        budget=budget_text(epochs),
        lacks=lacks,
    )
