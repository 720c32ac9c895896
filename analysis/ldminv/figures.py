"""Figures of paper 000 (LD-Minv, D-SVD) from the store's frames: medians over seeds, the paper's
numbers drawn beside ours where it reports them. pandas, numpy and matplotlib only."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analysis.curve_plot import draw_lines, seed_lines
from analysis.figures import Figure, save_figure
from analysis.ldminv import paper
from analysis.ldminv.frames import (
    coeffs,
    done,
    dsvd,
    med,
    minv,
    opt_label,
    trained,
)
from analysis.style import line, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure as MplFigure

MEDIAN_NOTE = "median over seeds"
GAP_LABEL = "|test - train| (Eq. 4)"


def fig1_kl(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    r = trained(minv(runs)).assign(opt=lambda d: opt_label(d))
    panels = [("D-Minv (C = 1)", r, "log10_test_loss_dminv")]
    panels += [(f"LD-Minv, {o}", r[r["opt"] == o], "log10_test_loss") for o in sorted(r["opt"].unique())]
    fig, axes = new_figure(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    for ax, (title, sub, col) in zip(axes[0], panels, strict=True):
        t = med(sub, ["K", "L"], col).unstack("L")
        im = ax.imshow(t.to_numpy(dtype=float), origin="lower", cmap="viridis", aspect="auto")
        ax.grid(False)  # cells, not a scale: no grid over them
        ax.set_xticks(range(len(t.columns)), [str(int(c)) for c in t.columns])
        ax.set_yticks(range(len(t.index)), [str(int(k)) for k in t.index])
        for i in range(t.shape[0]):
            for j in range(t.shape[1]):
                v = t.iat[i, j]
                if np.isfinite(v):
                    ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=7, color="w")
        ax.set_xlabel("L")
        ax.set_ylabel("K")
        ax.set_title(title)
        fig.colorbar(im, ax=ax, label="log10 test loss")
    fig.suptitle("Fig. 1(a): median log10 TestLoss; paper LD-Minv: (K,L)=(7,4) -1.0, (7,9) -4.6, (2,9) +0.32")
    return save_figure(fig, out_dir, "fig1_kl")


def _sweep(runs: pd.DataFrame, out_dir: Path, axis: str, stem: str, title: str) -> list[Path]:
    r = minv(runs)
    f64 = trained(r[r["dtype"] == "float64"]).assign(opt=lambda d: opt_label(d))
    fig, ax = new_figure(figsize=(6, 4.2))
    d = med(f64, [axis], "log10_test_loss_dminv")
    ax.plot(d.index, d.to_numpy(), "k-o", label="D-Minv (float64)", ms=4)
    for o in sorted(f64["opt"].unique()):
        s = med(f64[f64["opt"] == o], [axis], "log10_test_loss")
        ax.plot(s.index, s.to_numpy(), "-s", label=f"LD-Minv {o}", ms=4)
    f32 = r[(r["dtype"] == "float32")]
    if not f32.empty:
        s = med(f32, [axis], "log10_test_loss")
        ax.plot(s.index, s.to_numpy(), "r--^", label="D-Minv float32 matrix path", ms=4)
    ax.set_xlabel(axis)
    ax.set_ylabel("log10 TestLoss (median over seeds)")
    ax.set_title(title)
    ax.legend(title=MEDIAN_NOTE)
    ax.grid(alpha=0.3)
    return save_figure(fig, out_dir, stem)


def fig1_k(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    return _sweep(runs, out_dir, "K", "fig1_k", "Fig. 1(b): LD-Minv vs D-Minv against K (L = 4)")


def fig1_l(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    return _sweep(runs, out_dir, "L", "fig1_l", "Fig. 1(c): LD-Minv vs D-Minv against L (K = 5)")


def table2_kappa(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    r = trained(minv(runs)).assign(opt=lambda d: opt_label(d))
    fig, ax = new_figure(figsize=(6.5, 4.2))
    for c0 in sorted(r["c0_rule"].unique()):
        sub = r[r["c0_rule"] == c0]
        d = -med(sub, ["kappa"], "log10_test_loss_dminv")
        ax.plot(d.index, d.clip(upper=32).to_numpy(), "--o", label=f"D-Minv c0={c0}", ms=4)
        for o in sorted(sub["opt"].unique()):
            s = med(sub[sub["opt"] == o], ["kappa"], "neg_log10_test_loss")
            ax.plot(s.index, s.clip(upper=32).to_numpy(), "-s", label=f"LD-Minv c0={c0} {o}", ms=4)
    ax.plot(paper.KAPPAS, paper.TABLE2_D, "k:", lw=2, label="paper D-Minv")
    ax.plot(paper.KAPPAS, paper.TABLE2_LD, "k-.", lw=2, label="paper LD-Minv")
    ax.set_xscale("log")
    ax.set_xlabel("kappa")
    ax.set_ylabel("-log10 TestLoss (clipped at 32)")
    ax.set_title("Table 2: K = 4, L = 10, A = U S V, S ~ U(1/kappa, 1)")
    ax.legend(title=MEDIAN_NOTE)
    ax.grid(alpha=0.3)
    return save_figure(fig, out_dir, "table2_kappa")


def table3_dsvd(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    r = dsvd(runs)
    fig, axes = new_figure(1, 2, figsize=(10, 4))
    for ax, col, init_col, p_init, p_final, name in (
        (
            axes[0],
            "test_loss",
            "test_loss_init",
            paper.TABLE3_INIT_LOSS,
            paper.TABLE3_FINAL_LOSS,
            "test loss (+ sum sigma)",
        ),
        (
            axes[1],
            "svd_mse_sum",
            "svd_mse_sum_init",
            paper.TABLE3_INIT_MSE,
            paper.TABLE3_FINAL_MSE,
            "SVD MSE (sum over r)",
        ),
    ):
        for rule in sorted(r["step_rule"].unique()):
            sub = r[(r["step_rule"] == rule)]
            s = med(sub, ["K_svd"], init_col)
            ax.plot(s.index, s.to_numpy(), "-o", label=f"untrained, {rule} rule", ms=4)
        tr = trained(r)
        for (opt, lr, iters), g in tr.groupby(["optimizer", "lr", "iters"]):
            s = med(g, ["K_svd"], col)
            ax.plot(s.index, s.to_numpy(), "s", label=f"trained: {opt} {lr:g}, {int(iters)} outer iterations", ms=6)
        ax.plot(paper.K_SVD, p_init, "k:", label="paper Init")
        ax.plot(paper.K_SVD, p_final, "k-.", label="paper Final")
        ax.set_yscale("log")
        ax.set_xlabel("K_svd")
        ax.set_ylabel(name)
        ax.legend(title=MEDIAN_NOTE)
        ax.grid(alpha=0.3)
    fig.suptitle("Table 3: D-SVD, inner LD-Minv K = 6, L = 4")
    return save_figure(fig, out_dir, "table3_dsvd")


def theory_lemma1(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    r = minv(runs).reset_index(drop=True)
    fig, ax = new_figure(figsize=(7, 4))
    labels = [
        f"{int(a)}x{int(b)} r{'' if pd.isna(k) else int(k)} L{int(l_)} {c}"
        for a, b, k, l_, c in zip(r["rows"], r["cols"], r["rank"], r["L"], r["c0_rule"], strict=True)
    ]
    x = np.arange(len(r))
    ax.semilogy(x, r["lemma1_max_rel_err"].clip(lower=1e-18), "o", label="Lemma 1: max relative error (e_k > 1e-7)")
    ax.semilogy(x, r["lemma1_max_abs_err"].clip(lower=1e-18), "s", label="Lemma 1: max absolute error (all k)")
    ax.semilogy(x, r["prop1_max_residual"].clip(lower=1e-18), "^", label="Prop. 1: max invariant-space residual")
    ax.axhline(1e-8, color="k", ls=":", lw=1)
    ax.set_xticks(x, labels, rotation=70, fontsize=6)
    ax.set_title("Lemma 1 / Prop. 1 on the float64 matrix path (fixed D-Minv)")
    ax.legend()
    return save_figure(fig, out_dir, "theory_lemma1")


def theory_prop1(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    r = minv(runs)
    fig, axes = new_figure(1, 2, figsize=(10, 4))
    for dt in sorted(r["dtype"].unique()):
        sub = r[r["dtype"] == dt]
        axes[0].semilogy(*_xy(med(sub, ["K"], "prop1_max_residual")), "-o", label=dt)
        axes[1].semilogy(*_xy(med(sub, ["K"], "x_norm_max")), "-o", label=dt)
    axes[0].set(xlabel="K", ylabel="max ||X A A+ - X||_F, ||A+ A X - X||_F")
    axes[1].set(xlabel="K", ylabel="max ||X_K||_2")
    title = "Prop. 1 on rank-deficient A: float64 stays invariant, float32 null-space noise grows (spec 6.4)"
    return _save_panels(fig, axes, out_dir, "theory_prop1", title)


def _save_panels(fig: MplFigure, axes: Any, out_dir: Path, name: str, title: str) -> list[Path]:
    """A figure of panels side by side, finished: a legend and a light grid on each panel, the title above."""
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return save_figure(fig, out_dir, name)


def _xy(s: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    return s.index.to_numpy(dtype=float), s.to_numpy(dtype=float)


def cost_to_reach(runs: pd.DataFrame, eps: float) -> pd.Series:
    """Per L: K*L (matmuls per matrix, up to a constant) of the smallest K whose median loss <= eps."""
    t = med(minv(runs), ["L", "K"], "test_loss")
    out = {}
    for order in sorted(t.index.get_level_values(0).unique()):
        s = t[order]
        ok = s[s <= eps]
        out[int(order)] = float(int(ok.index.min()) * order) if len(ok) else math.nan
    return pd.Series(out, dtype=float)


def theory_cost(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    from matplotlib.ticker import MaxNLocator

    fig, ax = new_figure(figsize=(6, 4))
    seeds = int(minv(runs).groupby(["L", "K"]).size().max()) if not runs.empty else 0
    for i, eps in enumerate((1e-8, 1e-20)):
        c = cost_to_reach(runs, eps)
        look = line(i)
        ax.plot(c.index, c.to_numpy(), marker="o", label=f"K·L to reach loss ≤ {eps:g}", **look)
        ls = np.arange(2, int(c.index.max()) + 1)
        fit = np.nanmedian(c.to_numpy() / (c.index.to_numpy() / np.log(c.index.to_numpy())))
        ax.plot(ls, fit * ls / np.log(ls), ":", color=look["color"], label=f"{fit:.1f} L / ln L")
        never = c.index[c.isna()]
        if len(never):  # an order whose largest K never got there: a mark on the top edge, not a gap
            k_max = int(minv(runs)["K"].max())
            ax.plot(
                never,
                np.full(len(never), 0.97 - 0.05 * i),  # one row per precision, inside the top edge
                "v",
                color=look["color"],
                transform=ax.get_xaxis_transform(),
                clip_on=False,
                markersize=7,
                label=f"not reached by K ≤ {k_max} (≤ {eps:g})",
            )
    ax.set_xlabel("order L")
    ax.set_ylabel("cost K·L (matrix products, up to a constant)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title("Cost to a fixed precision grows like L / ln L (spec 4.3)")
    ax.legend(title=f"median over {seeds} seed{'s' if seeds != 1 else ''}")
    return save_figure(fig, out_dir, "theory_cost")


def theory_lemma2(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    r = minv(runs)
    fig, ax = new_figure(figsize=(6, 4))
    for _, row in r.iterrows():
        c = coeffs(row["coeffs_json"])
        ax.plot(
            range(1, len(c) + 1), c, "-o", alpha=0.7, label=f"{int(row['rows'])}x{int(row['cols'])} seed {row['seed']}"
        )
    ax.axhline(1.0, color="k", ls=":")
    ax.set_xlabel("layer k")
    ax.set_ylabel("learned C_k (init 0)")
    ax.set_title("Lemma 2: warm-up coefficients after GD (theory: C_k -> about 1 for k < K)")
    ax.legend()
    return save_figure(fig, out_dir, "theory_lemma2")


def theory_thm1(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    r = minv(runs)
    fig, ax = new_figure(figsize=(6.5, 4.2))
    lines = seed_lines(
        r,
        curves[curves["step"] > 0],
        ["n_train", "K"],
        "train_loss",
        label=lambda k: f"n={int(k['n_train'])}, K={int(k['K'])}",
    )
    draw_lines(ax, lines, "GD iteration t", "training loss (Eq. 4)")
    ax.set_title("Theorem 1: full-batch GD on the coefficients (linear convergence?)")
    return save_figure(fig, out_dir, "theory_thm1")


def theory_thm2(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    r = minv(runs)
    fig, axes = new_figure(1, 2, figsize=(10, 4))
    for n in sorted(r["n_train"].dropna().unique()):
        sub = r[r["n_train"] == n]
        if sub["K"].nunique() > 1:
            axes[0].loglog(*_xy(med(sub, ["K"], "gen_gap").abs()), "-o", label=f"n = {int(n)}")
    k_mode = r["K"].mode().iloc[0]
    s = med(r[r["K"] == k_mode], ["n_train"], "gen_gap").abs()
    axes[1].loglog(*_xy(s), "-o", label=f"K = {int(k_mode)}")
    axes[0].set(xlabel="K", ylabel=GAP_LABEL)
    axes[1].set(xlabel="n (training matrices)", ylabel=GAP_LABEL)
    return _save_panels(fig, axes, out_dir, "theory_thm2", "Theorem 2: generalisation gap against K and n")


def theory_prop4(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    r = done(runs)
    fig, ax = new_figure(figsize=(6, 4))
    ax.loglog(*_xy(med(r, ["delta"], "e_inf_final")), "-o", label="measured ||e_K||_inf")
    ax.loglog(*_xy(med(r, ["delta"], "prop4_bound")), "k--", label="Prop. 4 bound e0^(L^K) + 17/8 delta")
    d = np.sort(r["delta"].astype(float).unique())
    ax.loglog(d, 2 * d, "k:", label="2 delta")
    ax.set_xlabel("delta = |C - 1|")
    ax.set_ylabel("||e_K||_inf")
    ax.legend(title=MEDIAN_NOTE)
    ax.set_title("Prop. 4: perturbed coefficients leave a floor about 2 delta")
    return save_figure(fig, out_dir, "theory_prop4")


FIGURES: dict[str, Figure] = {
    "fig1_kl": fig1_kl,
    "fig1_k": fig1_k,
    "fig1_l": fig1_l,
    "table2_kappa": table2_kappa,
    "table3_dsvd": table3_dsvd,
    "theory_lemma1": theory_lemma1,
    "theory_prop1": theory_prop1,
    "theory_cost": theory_cost,
    "theory_lemma2": theory_lemma2,
    "theory_thm1": theory_thm1,
    "theory_thm2": theory_thm2,
    "theory_prop4": theory_prop4,
}
