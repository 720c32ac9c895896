"""Claims of paper 003 (Zou, Long, Gu: global convergence of deep linear ResNets), spec §3 and §4."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.claims import FAILS, HOLDS, NO_DATA, Claim, Verdict, fmt, median_by, medians, on_drawn_problems, twins

TASK = "linear_resnet"


def identity_stuck_others_converge(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    ratio = median_by(runs["loss_final"] / runs["y_sq_half"], runs["transform"])
    rel = median_by(runs["rel_subopt_final"], runs["transform"])
    if not {"identity", "gaussian", "modified_identity"} <= set(ratio.index):
        return Verdict(NO_DATA, f"transforms present: {sorted(ratio.index)}")
    stuck = 0.8 <= ratio["identity"] <= 1.3
    converge = rel["gaussian"] <= 1e-6 and rel["modified_identity"] <= 1e-6
    return Verdict(
        HOLDS if stuck and converge else FAILS,
        f"identity final loss / (||Y||^2/2) = {ratio['identity']:.3f}; final relative suboptimality: {fmt(rel)}",
        paper="identity stays near ||Y||^2/2; Gaussian and modified identity reach the global minimum",
    )


def modified_identity_faster(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    t = medians(runs, ["transform"], "iters_rel_1e6")
    if not {"gaussian", "modified_identity"} <= set(t.index) or not np.isfinite(t["modified_identity"]):
        return Verdict(NO_DATA, f"iterations to 1e-6: {fmt(t)}")
    ratio = t["gaussian"] / t["modified_identity"]
    verdict = HOLDS if 1.0 < ratio <= 2.0 else FAILS
    return Verdict(
        verdict,
        f"iterations to 1e-6 (median): {fmt(t)}; Gaussian / modified = {ratio:.1f}x",
        paper="modified identity converges slightly faster",
    )


def _depth_trend(runs: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    t = medians(runs, ["model", "depth"], "iters_rel_1e6")
    return t.get("resnet", pd.Series(dtype=float)), t.get("standard", pd.Series(dtype=float))


def resnet_flat_standard_slows(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    res, std = _depth_trend(runs)
    if len(res) < 2 or len(std) < 2:
        return Verdict(NO_DATA, "needs both models at two or more depths")
    # a ResNet that never reaches 1e-6 at some depth is not flat in depth (inf / inf would read as nan)
    res_spread = res.max() / res.min() if np.isfinite(res).all() else np.inf
    # a diverged standard net (never reaches 1e-6) counts as slower than any finite count
    std_growth = std.iloc[-1] / std.iloc[0]
    holds = res_spread <= 1.6 and std_growth >= 1.5
    return Verdict(
        HOLDS if holds else FAILS,
        f"ResNet iterations to 1e-6 by depth: {fmt(res)} (max/min {res_spread:.2f}); "
        f"standard: {fmt(std)} (deepest/shallowest {std_growth:.2f})",
        paper="standard net slows down as L grows; ResNet curves are quite similar for every L",
        theory="Thm 3.1: T_eps independent of L at eta = c/(L ||A||^2 ||B||^2 ||X||^2)",
    )


def iterations_linear_in_kappa(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    res = runs[runs["model"] == "resnet"]
    t = medians(res, ["kappa"], "iters_rel_1e6")
    t = t[np.isfinite(t) & (t > 0)]
    if len(t) < 3:
        return Verdict(NO_DATA, f"finite iteration counts at {len(t)} kappas")
    slope = float(np.polyfit(np.log(t.index.astype(float)), np.log(t.to_numpy()), 1)[0])
    return Verdict(
        HOLDS if 0.5 <= slope <= 1.3 else FAILS,
        f"ResNet iterations to 1e-6 by kappa: {fmt(t)}; log-log slope {slope:.2f}",
        theory="Cor. 3.4: T = O(kappa log(1/eps)), slope 1 (spec [ours]: 0.85-0.93)",
    )


def margin_never_met(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    m = runs["margin"].astype(float)
    return Verdict(
        HOLDS if (m < runs["margin_required"].astype(float)).all() else FAILS,
        f"C_eff over the grid: {m.min():.3g} .. {m.max():.3g} (needs >= {runs['margin_required'].iloc[0]:.4g})",
        theory="the proof's constant is far from met: the experiments test scalings, not constants (spec §4.5)",
    )


def _threshold_width(t: pd.Series) -> float:
    """Smallest width from which every larger width reaches 1e-6 within the budget (median over seeds)."""
    reached = np.isfinite(t.sort_index().to_numpy())
    widths = t.sort_index().index.to_numpy()
    for i in range(len(widths)):
        if reached[i:].all():
            return float(widths[i])
    return np.inf


def width_threshold_depth_free(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    gauss = runs[runs["transform"] == "gaussian"]
    t = medians(gauss, ["model", "depth", "m"], "iters_rel_1e6")
    if "resnet" not in t.index.get_level_values(0) or "standard" not in t.index.get_level_values(0):
        return Verdict(NO_DATA, "needs both models")
    m_star = {
        (model, depth): _threshold_width(t[model][depth])
        for model in ("resnet", "standard")
        for depth in t[model].index.get_level_values(0).unique()
    }
    depths = sorted({d for _, d in m_star})
    if len(depths) < 2:
        return Verdict(NO_DATA, "needs two depths")
    lo, hi = depths[0], depths[-1]
    res_same = m_star[("resnet", lo)] == m_star[("resnet", hi)]
    std_grows = m_star[("standard", hi)] > m_star[("standard", lo)]
    text = "; ".join(f"{model} L={d}: m* = {v:g}" for (model, d), v in sorted(m_star.items()))
    return Verdict(
        HOLDS if res_same and std_grows else FAILS,
        f"smallest width from which all wider nets reach 1e-6 (median over seeds): {text}",
        theory=(
            "Cor. 3.4: the ResNet needs m ~ k r kappa^2 (no L); Du & Hu's standard net m ~ L k r kappa^3 "
            "(sufficient conditions)"
        ),
    )


def sgd_stall_scales_with_step_over_batch(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    noisy = runs[(runs["noise"] > 0) & (runs["batch_size"] < runs["n"])]  # B = n is full-batch GD: no stall
    tail = median_by(noisy["subopt_tail"], [noisy["c"], noisy["batch_size"]])
    if tail.index.get_level_values(0).nunique() < 2 or tail.index.get_level_values(1).nunique() < 3:
        return Verdict(NO_DATA, f"stall levels: {fmt(tail)}")
    by_c = [tail[c].sort_index().to_numpy() for c in sorted(tail.index.get_level_values(0).unique())]
    falls_with_b = all((np.diff(v) <= 0).all() for v in by_c)
    grows_with_c = bool((by_c[-1] >= by_c[0]).all())
    return Verdict(
        HOLDS if falls_with_b and grows_with_c else FAILS,
        f"median excess loss over the last quarter (c, B): {fmt(tail)}",
        theory="Thm 3.6: with L* > 0 and a constant step, SGD stalls at an excess ~ eta n / B (spec §4.9)",
    )


CLAIMS = [
    Claim(
        "003.fig1a.identity_stuck",
        "003",
        TASK,
        twins("fig1a_transforms_m40"),
        "identity transforms stay near ||Y||^2/2; Gaussian and modified identity converge (m = 40)",
        identity_stuck_others_converge,
    ),
    Claim(
        "003.fig1b.identity_stuck",
        "003",
        TASK,
        twins("fig1b_transforms_m200"),
        "identity transforms stay near ||Y||^2/2; Gaussian and modified identity converge (m = 200)",
        identity_stuck_others_converge,
    ),
    Claim(
        "003.fig1b.modified_slightly_faster",
        "003",
        TASK,
        twins("fig1b_transforms_m200"),
        "modified identity converges slightly (at most 2x) faster than Gaussian transforms",
        modified_identity_faster,
        expected=FAILS,
        why_expected=(
            "ordering holds but the gap is ~5x at m = 200 and ~20x at m = 40 with the normalised step "
            "(our measurement, not 'slightly')"
        ),
    ),
    Claim(
        "003.fig1c.depth",
        "003",
        TASK,
        twins("fig1c_depth_m40"),
        "standard net slows with depth, ResNet iteration count flat in depth (m = 40)",
        resnet_flat_standard_slows,
    ),
    Claim(
        "003.fig1d.depth",
        "003",
        TASK,
        twins("fig1d_depth_m200"),
        "standard net slows with depth, ResNet iteration count flat in depth (m = 200)",
        resnet_flat_standard_slows,
    ),
    Claim(
        "003.cor34.kappa",
        "003",
        TASK,
        twins("sweep_kappa"),
        "iterations to 1e-6 grow about linearly in kappa",
        iterations_linear_in_kappa,
    ),
    Claim(
        "003.cor34.width",
        "003",
        TASK,
        twins("sweep_width"),
        "the ResNet's width threshold does not move with depth; the standard net's grows",
        width_threshold_depth_free,
    ),
    Claim(
        "003.thm36.sgd_stall",
        "003",
        TASK,
        twins("sweep_sgd_batch"),
        "SGD with L* > 0 stalls at an excess loss that falls with the batch size and grows with the step",
        sgd_stall_scales_with_step_over_batch,
    ),
    Claim(
        "003.sec45.margin",
        "003",
        TASK,
        twins("fig1a_transforms_m40"),
        "no experimental configuration meets the proof's margin C_eff >= 25.35",
        margin_never_met,
    ),
]

# The problem is a draw (X, Phi and E from data_seed, None reading the seed): one draw decides nothing close
# (issue 43), so every claim is refused a verdict on fewer than 3 seeds (every full grid runs 3 or 5).
CLAIMS = on_drawn_problems(CLAIMS, "data_seed", {})
