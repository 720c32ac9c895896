"""Claims of paper 002 (Shin: layer-wise BCGD for deep linear networks), spec §3 and §4 (T7)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.aggregate import never_as_inf
from analysis.claims import (
    FAILS,
    HOLDS,
    NO_DATA,
    Claim,
    RuleChange,
    Verdict,
    fmt,
    median,
    median_by,
    medians,
    on_drawn_problems,
    twins,
)

TASK = "deep_linear"
TOL = 1e-10
ODD_OVERLAP = 1.5  # "their curves overlap" (Fig. 8): odd depths' errors after the budget within this factor


def sweeps_decrease_with_depth(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    s = medians(runs, ["L"], "sweeps_to_tol", never=None).replace(-1, np.inf)
    finite = s[np.isfinite(s)]
    if len(finite) < 3:
        return Verdict(NO_DATA, f"sweeps to 1e-10 by depth: {fmt(s)}")
    decreasing = bool((np.diff(s.to_numpy()) <= 0).all())
    return Verdict(
        HOLDS if decreasing else FAILS,
        f"median sweeps to 1e-10 by depth: {fmt(s)}",
        paper="deeper is faster per sweep (Fig. 2 left)",
    )


def deepest_converges_in_one_sweep(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    deepest = runs["L"].max()
    if deepest < 400:
        return Verdict(NO_DATA, f"deepest network is L = {deepest}; the claim is about L = 400")
    e = median(runs.loc[runs["L"] == deepest, "err_sweep1"])
    return Verdict(
        HOLDS if e <= TOL else FAILS,
        f"L = {deepest}: median error after one sweep {e:.3g}",
        paper="with L = 400 one sweep reaches the optimum",
    )


def depth1_fewest_iterations(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    it = medians(runs, ["L"], "iters_to_tol")
    if 1 not in it.index or not np.isfinite(it[1]):
        return Verdict(NO_DATA, f"iterations to 1e-10 by depth: {fmt(it)}")
    return Verdict(
        HOLDS if it[1] <= it.min() else FAILS,
        f"median iterations to 1e-10 by depth: {fmt(it)}",
        paper="per iteration, depth 1 is fastest when X is well conditioned",
    )


def _err_at(curves: pd.DataFrame, runs: pd.DataFrame, step: int) -> pd.Series:
    """Each run's error at its last logged step <= `step`, median over seeds per depth."""
    c = curves[curves["step"] <= step].groupby("run_id").last()["err"]
    frame = runs.set_index("run_id").join(c.rename("err_at"), how="inner")
    return median_by(frame["err_at"], frame["L"])


def deep_beats_depth1_illcond(runs: pd.DataFrame, curves: pd.DataFrame | None) -> Verdict:
    if curves is None or curves.empty:
        return Verdict(NO_DATA, "no curves")
    horizon = int(min(runs.loc[runs["L"] > 1, "n_steps"].max(), 50_000)) if (runs["L"] > 1).any() else 0
    e = _err_at(curves, runs, horizon)
    if 1 not in e.index or len(e) < 2:
        return Verdict(NO_DATA, f"error at {horizon} iterations by depth: {fmt(e)}")
    deep = e.drop(index=1)
    ratio = float(deep.max() / e[1])
    return Verdict(
        HOLDS if ratio < 1e-3 else FAILS,
        f"median error at {horizon} iterations by depth: {fmt(e)}; worst deep / depth 1 = {ratio:.2g}",
        paper="per iteration deep networks decay drastically faster than depth 1 when cond(X) = 236",
    )


def depth_pays_per_flop(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    f = medians(runs, ["L"], "flops_to_tol", never=None)
    f = f.where(f > 0, np.inf)
    if 1 not in f.index or not np.isfinite(f[1]) or not np.isfinite(f.drop(index=1)).any():
        return Verdict(NO_DATA, f"flops to 1e-10 by depth: {fmt(f)}")
    best_deep = f.drop(index=1).min()
    return Verdict(
        HOLDS if best_deep < f[1] else FAILS,
        f"median learner flops to 1e-10 by depth: {fmt(f)}; best deep / depth 1 = {best_deep / f[1]:.2f}",
        paper="depth accelerates 'even when the computational cost is considered'",
        theory="spec G11 [ours]: L = 5 needs 5.3x fewer iterations but 1.4x more flops than L = 1",
    )


def _arch(row: pd.Series) -> str:
    """Fig. 5's architectures by their number of hidden layers narrower than max(d_in, d_out)."""
    wide = max(row["d_in"], row["d_out"])
    widths = row["widths"]
    if widths is not None and not (isinstance(widths, float) and np.isnan(widths)):
        narrow = sum(int(w) < wide for w in widths)
    else:
        narrow = (row["L"] - 1) if (row["width"] or wide) < wide else 0
    return "arch3 (all wide)" if narrow == 0 else ("arch2 (one narrow layer)" if narrow == 1 else "arch1 (all narrow)")


def narrow_layer_stalls(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    e = median_by(runs["err_final"], runs.apply(_arch, axis=1))
    names = ["arch3 (all wide)", "arch2 (one narrow layer)", "arch1 (all narrow)"]
    if not set(names) <= set(e.index):
        return Verdict(NO_DATA, f"architectures present: {sorted(e.index)}")
    ordered = e[names[0]] < e[names[1]] < e[names[2]] or (e[names[0]] <= TOL and e[names[1]] < e[names[2]])
    return Verdict(
        HOLDS if ordered else FAILS,
        f"median final error: {fmt(e[names])}",
        paper="Arch 3 < Arch 2 < Arch 1: a narrow layer stalls training (Fig. 5)",
    )


def order_rule_orth_identity(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    oi = runs[runs["init"] == "orth_identity"]
    if oi.empty or set(oi["order"]) != {"asc", "desc"}:
        return Verdict(NO_DATA, "needs orth-identity runs in both orders")
    key = never_as_inf(oi["iters_to_tol"]).to_numpy()
    score = pd.Series(
        np.where(np.isfinite(key), key, 1e12 + oi["err_final"]), index=oi.index
    )  # unreached: rank by error
    best = median_by(score, [oi["d_in"] < oi["d_out"], oi["order"]])
    parts, holds = [], True
    for wide_out, want in ((True, "asc"), (False, "desc")):
        if wide_out not in best.index.get_level_values(0):
            continue
        other = "desc" if want == "asc" else "asc"
        ok = best[(wide_out, want)] < best[(wide_out, other)]
        holds &= ok
        parts.append(f"d_out {'>' if wide_out else '<'} d_in: {want} {'beats' if ok else 'does not beat'} {other}")
    return Verdict(
        HOLDS if holds else FAILS,
        "; ".join(parts),
        paper="with orth-identity, ascending if d_out > d_in, descending if d_in > d_out (Fig. 6)",
    )


def _bcgd_against_best_gd(
    runs: pd.DataFrame, score: pd.Series, describe: Callable[[str, float, float, pd.DataFrame], str], paper: str
) -> Verdict:
    """Per data set: BCGD's median `score` (lower is better, inf where a run never got there) against the best
    GD step's (the lowest of the steps' medians); decided on the data sets where BCGD's is finite and GD ran."""
    parts, holds, decided = [], True, False
    for data, grp in runs.groupby(runs["data"].astype(str)):
        b = median(score[grp.index][grp["algo"] == "bcgd"])
        gd = grp[grp["algo"] == "gd"]
        g = median_by(score[gd.index], gd["lr"]).min() if not gd.empty else np.inf
        parts.append(describe(data, b, g, grp))
        if np.isfinite(b) and not gd.empty:
            decided = True
            holds &= b < g
    if not decided:
        return Verdict(NO_DATA, "; ".join(parts))
    return Verdict(HOLDS if holds else FAILS, "; ".join(parts), paper=paper)


def bcgd_beats_tuned_gd(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    return _bcgd_against_best_gd(
        runs,
        never_as_inf(runs["iters_to_tol"]),  # a GD run that diverged or failed never got there
        lambda data, b, g, _: f"{data}: BCGD {b:.4g} iterations to 1e-10, best GD {g:.4g}",
        "BCGD with the optimal step beats hand-tuned GD per iteration (Fig. 4)",
    )


def du_hu_step_diverges(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    du = runs[(runs["algo"] == "gd") & (runs["lr_rule"] == "du_hu")]
    if du.empty:
        return Verdict(NO_DATA, "no GD runs with the Du-Hu step")
    share = float((du["status"] == "diverged").mean())
    steps = du.loc[du["status"] == "diverged", "diverged_step"]
    return Verdict(
        HOLDS if share == 1.0 else FAILS,
        f"{share:.0%} of {len(du)} Du-Hu GD runs diverged"
        + (f", at steps {sorted(int(s) for s in steps.unique())}" if len(steps) else ""),
        paper="the Du-Hu learning rate makes GD diverge within few iterations",
    )


def _final_by_depth(runs: pd.DataFrame) -> pd.Series:
    """Each depth's error at the end of its budget (median over its runs; a run that diverged: inf)."""
    err = runs["err_final"].where(runs["status"] == "ok", np.inf)
    return median_by(err, runs["L"])


def mnist_depth2_best(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    e = _final_by_depth(runs)
    if 2 not in e.index or len(e) < 3:
        return Verdict(NO_DATA, f"error after the budget by depth: {fmt(e)}")
    return Verdict(
        HOLDS if e[2] <= e.min() else FAILS,
        f"error after {int(runs['n_iters'].max())} iterations by depth: {fmt(e)}; best L = {int(e.idxmin())}",
        paper="L = 2 is best (Fig. 8)",
    )


def mnist_even_depths_accelerate(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    """Even depths end below every odd depth, and the odd depths (1 included) overlap: their errors after the
    budget within a factor ODD_OVERLAP of each other."""
    e = _final_by_depth(runs)
    even, odd = e[e.index % 2 == 0], e[e.index % 2 == 1]
    if len(even) < 2 or len(odd) < 2:
        return Verdict(NO_DATA, f"error after the budget by depth: {fmt(e)}")
    below = bool(even.max() < odd.min())
    spread = float(odd.max() / odd.min()) if odd.min() > 0 else np.inf
    return Verdict(
        HOLDS if below and spread <= ODD_OVERLAP else FAILS,
        f"error after {int(runs['n_iters'].max())} iterations, even depths: {fmt(even)}; odd depths: {fmt(odd)} "
        f"(worst even / best odd = {even.max() / odd.min():.3g}, odd spread x{spread:.3g})",
        paper="even depths accelerate; odd depths behave alike, their curves overlap (Fig. 8)",
    )


def bcgd_beats_gd_at_budget(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    """Per real data set that ran: BCGD's error after the budget against the best GD step's (a diverged run
    counts as never converging; a data set whose runs failed, its files missing, is left out)."""

    def describe(data: str, b: float, g: float, grp: pd.DataFrame) -> str:
        if not np.isfinite(b):
            return f"{data}: not run ({', '.join(sorted(set(grp['status'])))})"
        return f"{data}: BCGD {b:.3g}, best GD step {g:.3g} after {int(grp['n_iters'].max())} iterations"

    err = runs["err_final"].where(runs["status"] == "ok", np.inf)
    return _bcgd_against_best_gd(runs, err, describe, "BCGD converges faster than GD on real data (Fig. 9)")


CLAIMS = [
    Claim(
        "002.fig2.sweeps_decrease",
        "002",
        TASK,
        twins("fig2_depth"),
        "sweeps to 1e-10 decrease with depth (cond 2.66)",
        sweeps_decrease_with_depth,
    ),
    Claim(
        "002.fig2.L400_one_sweep",
        "002",
        TASK,
        twins("fig2_depth"),
        "L = 400 reaches 1e-10 after one sweep",
        deepest_converges_in_one_sweep,
    ),
    Claim(
        "002.fig2.depth1_fewest_iterations",
        "002",
        TASK,
        twins("fig2_depth"),
        "depth 1 needs the fewest iterations (cond 2.66)",
        depth1_fewest_iterations,
    ),
    Claim(
        "002.fig3.deep_beats_depth1",
        "002",
        TASK,
        twins("fig3_depth_illcond"),
        "at 5e4 iterations every depth 3..11 is below 1e-3 x the depth-1 error (cond 236)",
        deep_beats_depth1_illcond,
        needs_curves=True,
    ),
    Claim(
        "002.fig3.per_flop",
        "002",
        TASK,
        twins("fig3_depth_illcond"),
        "depth accelerates even per flop (cond 236)",
        depth_pays_per_flop,
        expected=FAILS,
        why_expected=(
            "counting the covariance-form flops of each iteration, the spec's independent implementation finds "
            "depth 5 costs 1.4x the flops of depth 1"
        ),
    ),
    Claim(
        "002.fig1.bcgd_beats_gd",
        "002",
        TASK,
        twins("fig1_bcgd_vs_gd"),
        "BCGD needs fewer iterations to 1e-10 than GD at the best hand-picked step (L = 100)",
        bcgd_beats_tuned_gd,
    ),
    Claim(
        "002.fig4.bcgd_beats_gd",
        "002",
        TASK,
        twins("fig4_bcgd_vs_gd"),
        "BCGD needs fewer iterations to 1e-10 than the best GD step tried",
        bcgd_beats_tuned_gd,
    ),
    Claim(
        "002.fig4.du_hu_diverges",
        "002",
        TASK,
        twins("fig4_bcgd_vs_gd"),
        "GD with the Du-Hu step diverges",
        du_hu_step_diverges,
    ),
    Claim(
        "002.fig5.narrow_layer",
        "002",
        TASK,
        twins("fig5_width"),
        "Arch 3 < Arch 2 < Arch 1 in final error",
        narrow_layer_stalls,
    ),
    Claim(
        "002.fig6.order_rule",
        "002",
        TASK,
        twins("fig6_order_init"),
        "orth-identity: ascending wins when d_out > d_in, descending when d_in > d_out",
        order_rule_orth_identity,
    ),
    Claim(
        "002.fig8.L2_best",
        "002",
        TASK,
        twins("fig8_mnist"),
        "MNIST (width 784, identity init): L = 2 has the lowest error after 1e4 iterations of L = 1..10",
        mnist_depth2_best,
    ),
    Claim(
        "002.fig8.even_depths",
        "002",
        TASK,
        twins("fig8_mnist"),
        "MNIST: every even depth ends below every odd depth after 1e4 iterations; odd depths within a factor 1.5",
        mnist_even_depths_accelerate,
    ),
    Claim(
        "002.fig9.bcgd_beats_gd",
        "002",
        TASK,
        twins("fig9_real_gd"),
        "BCGD's error after 1e4 iterations is below the best GD step's, on each of the figure's real data sets "
        "(MNIST and UCI Ethanol)",
        bcgd_beats_gd_at_budget,
        history=(
            RuleChange(
                "2026-11-29",
                "decided on each real data set that ran, whatever part of the grid had run",
                "holds (MNIST only: 7 of 14 runs)",
                "a verdict on half a grid is no verdict on the figure: the UCI half never ran. Every claim now stands "
                "undecided on a partial grid (analysis.claims.evaluate)",
                needs="the UCI Ethanol half of fig9_real_gd (7 runs): the UCI files are not on this machine "
                "(docs/deep_linear.md says how to prepare them)",
            ),
        ),
    ),
]

# The synthetic figures' problem is a draw (X and Y from data_seed, None reading the seed): one draw decides
# nothing close (issue 43), so their claims are refused a verdict on fewer than 3 seeds. The real-data figures
# are exempt: MNIST and UCI Ethanol are fixed data sets, and their runs' seed draws nothing of the problem.
CLAIMS = on_drawn_problems(
    CLAIMS,
    "data_seed",
    {
        "002.fig8.L2_best": "MNIST is fixed data (identity init): no problem draw",
        "002.fig8.even_depths": "MNIST is fixed data (identity init): no problem draw",
        "002.fig9.bcgd_beats_gd": "MNIST and UCI Ethanol are fixed data sets: no problem draw",
    },
)
