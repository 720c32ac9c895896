"""Figures of paper 001 (Math-L2O, Song, Lin & Xu) from the store's frames.

Training curves are per epoch (the curve's `step` is the training step k of an `l2o` run): the last
objective F(X_T^k) against k with GD's value dashed (Fig. 3, 6a-9a), the objective trajectory F(X_t) over
t = 0..T at logged epochs (Figs. 4, 6b-9b, from the JSON summary field `traj_checkpoints`), the improvement
ratios against k
(Fig. 5), and the final ratios against e (Fig. 10) and the learning rate (Fig. 11). Every improvement panel
also draws the constant-step baselines stored in each run: 2/(beta+beta_0) and the best scanned c/beta.
Medians over seeds, interquartile bands. pandas, numpy and matplotlib only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.curve_plot import draw_lines, seed_lines
from analysis.figures import Figure, save_figure
from analysis.load import finished
from analysis.style import line, new_figure

MEDIAN_NOTE = "median over seeds"


def _done(runs: pd.DataFrame) -> pd.DataFrame:
    """The learner's finished runs (algo l2o; the GD baselines are columns of each run)."""
    out = finished(runs)
    return out[out["algo"] == "l2o"] if "algo" in out else out


def _label(key: tuple | str, names: list[str]) -> str:
    vals = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{n}={v:g}" if isinstance(v, float) else f"{n}={v}" for n, v in zip(names, vals, strict=True))


def _varying(runs: pd.DataFrame, candidates: list[str]) -> list[str]:
    keys = [c for c in candidates if c in runs and runs[c].astype(str).nunique() > 1]
    return keys or [candidates[0]]


GROUP_CANDIDATES = ["d", "b", "n_problems", "n1", "n2", "data", "e", "lr", "depth", "T", "dtype"]


def _lines(runs: pd.DataFrame, curves: pd.DataFrame, keys: list[str], col: str) -> list:
    return seed_lines(runs, curves, keys, col, label=lambda k: _label(tuple(k[c] for c in keys), keys))


def _rows(runs: pd.DataFrame, key: dict) -> pd.DataFrame:
    """The runs of one line's group."""
    mask = np.ones(len(runs), dtype=bool)
    for col, value in key.items():
        mask &= (runs[col] == value).to_numpy()
    return runs[mask]


def training(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """Figs. 3 and 5 (and 6a-9a): F(X_T^k) and the improvement ratios against the training step k, with
    each group's constant-step baselines as horizontal lines of its colour."""
    runs = _done(runs)
    if runs.empty or curves.empty:
        return []
    keys = _varying(runs, GROUP_CANDIDATES)
    fig, axes = new_figure(1, 3, figsize=(16, 4.6))
    lines = _lines(runs, curves, keys, "loss")
    baselines = [(ln.style["color"], _rows(runs, ln.key)) for ln in lines if not ln.diverged]
    gd = [(c, part["F_T_gd"].median(), part["F_T_opt"].median()) for c, part in baselines]
    objective = "last objective $F(X_T^k)$"
    references = [v for _, a, b in gd for v in (a, b)]
    draw_lines(axes[0], lines, "training step k", objective, legend=False, include=references)  # legend: panel 2
    for c, at_gd, at_opt in gd:
        axes[0].axhline(at_gd, color=c, ls="--", lw=1)
        axes[0].axhline(at_opt, color=c, ls=":", lw=1)
    axes[0].set_title("dashed: GD 1/β, dotted: GD 2/(β+β₀)")
    for ax, col, what in ((axes[1], "imp_last", "$r_T$ (last iterate)"), (axes[2], "imp_mean", "mean$_t$ $r_t$")):
        lines = _lines(runs, curves, keys, f"{col}_t")  # the curve's value at step k; runs hold the final one
        refs = []
        for ln in lines:
            part = _rows(runs, ln.key)
            refs.append((ln.style["color"], ":", part[f"{col}_opt"].median()))
            if f"{col}_best_c" in part and part[f"{col}_best_c"].notna().any():
                refs.append((ln.style["color"], "-.", part[f"{col}_best_c"].median()))
        draw_lines(
            ax,
            lines,
            "training step k",
            f"improvement over GD {what}",
            log_y=False,
            legend=ax is axes[1],
            include=[0.5] + [v for *_, v in refs],
        )
        for c, dash, value in refs:
            ax.axhline(value, color=c, ls=dash, lw=1)
        ax.axhline(0.5, color="grey", lw=0.8)
        low, high = ax.get_ylim()
        ax.set_ylim(max(low, -2.0), min(high, 1.05))  # a ratio is at most 1; below -2 GD is far ahead anyway
        ax.set_title(f"improvement over GD: {what}; dotted 2/(β+β₀), dash-dot best c")
    return save_figure(fig, out_dir, f"{stem}_training")


def _traj(text: object) -> np.ndarray | None:
    if not isinstance(text, str) or not text:
        return None
    return np.array([np.nan if v is None else v for v in json.loads(text)], dtype=float)


def trajectories(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """Figs. 4 and 6b-9b: F(X_t), t = 0..T, of the learner at logged epochs k, beside GD's (first seed of
    each configuration: trajectories are not averaged across different problem draws)."""
    runs = _done(runs)
    if runs.empty or "traj_checkpoints" not in runs:
        return []
    keys = _varying(runs, GROUP_CANDIDATES)
    from matplotlib import colormaps

    groups = list(runs.sort_values("seed").groupby(keys))[:6]
    fig, axes = new_figure(1, len(groups), figsize=(5 * len(groups), 4.2), squeeze=False)
    for ax, (key, part) in zip(axes[0], groups, strict=True):
        run = part.iloc[0]
        text = run["traj_checkpoints"]
        saved = json.loads(text) if isinstance(text, str) and text else {}
        cmap = colormaps["viridis"].resampled(max(len(saved), 2))
        for j, k in enumerate(sorted(saved, key=int)):
            tr = np.array([np.nan if v is None else v for v in saved[k]], dtype=float)
            ax.plot(np.arange(tr.size), tr, color=cmap(j), lw=1, label=f"k={k}")
        for col, ls, name in (("traj_gd", "--", "GD 1/beta"), ("traj_opt", ":", "GD 2/(b+b0)")):
            base = _traj(run.get(col))
            if base is not None:
                ax.plot(np.arange(base.size), base, color="black", ls=ls, lw=1.2, label=name)
        ax.set(yscale="log", xlabel="GD iteration t", ylabel="F(X_t)", title=_label(key, keys))
        ax.legend(ncols=2)
    return save_figure(fig, out_dir, f"{stem}_trajectories")


def final_vs(runs: pd.DataFrame, out_dir: Path, stem: str, x: str, title: str) -> list[Path]:
    """Figs. 10-11: the final r_T and mean_t r_t against `x`, one line per other varying key."""
    runs = _done(runs)
    if runs.empty or x not in runs:
        return []
    keys = [k for k in _varying(runs, GROUP_CANDIDATES) if k != x] or ["d"]
    fig, axes = new_figure(1, 2, figsize=(11, 4.2))
    for ax, col in zip(axes, ("imp_last", "imp_mean"), strict=True):
        for i, (key, part) in enumerate(runs.groupby(keys)):
            med = part.groupby(x)[col].median()
            color = line(i)["color"]
            ax.plot(med.index.astype(float), med.to_numpy(), "o-", color=color, label=_label(key, keys))
            ax.axhline(part[f"{col}_opt"].median(), color=color, ls=":", lw=1)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set(xscale="log", xlabel=x, ylabel=col, title=f"{title}: {col} (dotted: 2/(beta+beta0))")
        ax.set_ylim(max(-2.0, min(-0.1, float(runs[col].min()) - 0.05)), 1.05)
        ax.legend(title=MEDIAN_NOTE)
    return save_figure(fig, out_dir, f"{stem}_final_vs_{x}")


def width(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """C6: rank and alpha_0 of G_{L-1,T} against n2 (K = N d marked), and C3-C5 ratios."""
    runs = _done(runs)
    if runs.empty:
        return []
    k = float((runs["n_problems"] * runs["d"]).iloc[0])
    fig, axes = new_figure(1, 2, figsize=(11, 4.2))
    med = runs.groupby("n2")[["rank_g0", "rank_g_final", "alpha0_thin", "sigma_max_g0"]].median()
    n2 = med.index.astype(float)
    axes[0].plot(n2, med["rank_g0"] / np.minimum(n2, k), "o-", label="rank(G^0) / min(n2, Nd)")
    axes[0].plot(n2, med["rank_g_final"] / np.minimum(n2, k), "s--", label="rank(G^final) / min(n2, Nd)")
    axes[0].axvline(k, color="grey", ls=":", label="n2 = Nd")
    axes[0].set(xscale="log", xlabel="n2", ylabel="relative rank", title="G_{L-1,T} is rank deficient (C6)")
    axes[0].legend()
    axes[1].plot(n2, (med["alpha0_thin"] / med["sigma_max_g0"]).clip(lower=1e-300), "o-", label="alpha_0 / sigma_max")
    axes[1].set(xscale="log", yscale="log", xlabel="n2", title="alpha_0 relative to sigma_max (C6)")
    axes[1].legend()
    out = save_figure(fig, out_dir, f"{stem}_rank")
    return out + training(runs, curves, out_dir, stem)


def e_threshold(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """C8: final r_T against e for each (depth, T)."""
    runs = _done(runs)
    if runs.empty:
        return []
    fig, axes = new_figure(1, 2, figsize=(11, 4.2))
    for i, ((depth, t), part) in enumerate(runs.groupby(["depth", "T"])):
        med = part.groupby("e")["imp_last"].median()
        axes[0].plot(
            med.index,
            med.clip(lower=1e-6).to_numpy(),
            marker="o",
            color=line(i)["color"],
            ls=["-", "--", ":", "-."][int(depth) % 4],
            label=f"L={depth}, T={t}",
        )
        eff = part.groupby("eta_eff")["imp_last"].median()
        axes[1].plot(eff.index, eff.clip(lower=1e-6).to_numpy(), "o", color=line(i)["color"])
    axes[0].set(xscale="log", yscale="log", xlabel="e", ylabel="r_T (clipped at 1e-6)", title="improvement vs e (C8)")
    axes[0].legend(ncols=2, title=MEDIAN_NOTE)
    axes[1].set(xscale="log", yscale="log", xlabel="lr e^{2(L-1)}", title="the same against eta_eff (spec G6)")
    return save_figure(fig, out_dir, f"{stem}_e_threshold")


def learned_steps(runs: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """The learned multiplier P_t (mean over coordinates, final epoch) against t, beside the constant
    multipliers: 1 (GD with 1/beta), 2 beta/(beta+beta0) and the best scanned c."""
    runs = _done(runs)
    if runs.empty or "p_mean_t_final" not in runs:
        return []
    keys = _varying(runs, GROUP_CANDIDATES)
    fig, ax = new_figure(figsize=(7, 4.2))
    for i, (key, part) in enumerate(runs.groupby(keys)):
        rows = [json.loads(t) for t in part["p_mean_t_final"] if isinstance(t, str) and t]
        if not rows:
            continue
        med = np.nanmedian(np.array([[np.nan if v is None else v for v in r] for r in rows], dtype=float), axis=0)
        color = line(i)["color"]
        ax.plot(np.arange(1, med.size + 1), med, color=color, label=_label(key, keys))
        ax.axhline(part["c_opt"].median(), color=color, ls=":", lw=1)
        if "c_best" in part and part["c_best"].notna().any():
            ax.axhline(part["c_best"].median(), color=color, ls="-.", lw=1)
    ax.axhline(1.0, color="black", ls="--", lw=1, label="GD 1/beta")
    ax.set(
        xlabel="GD iteration t",
        ylabel="mean_j P_t (step x beta)",
        ylim=(0, 2.05),
        title="learned multipliers (dotted: 2 beta/(beta+beta0), dash-dot: best c)",
    )
    ax.legend(title=MEDIAN_NOTE)
    return save_figure(fig, out_dir, f"{stem}_steps")


def main_fig(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    return (
        training(runs, curves, out_dir, stem)
        + trajectories(runs, curves, out_dir, stem)
        + learned_steps(runs, out_dir, stem)
    )


def ablation(x: str, title: str) -> Callable[[pd.DataFrame, pd.DataFrame, Path, str], list[Path]]:
    def draw(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
        return final_vs(runs, out_dir, stem, x, title) + training(runs, curves, out_dir, stem)

    return draw


def lemma5(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """Lemmas 5.1-5.4 (issue 43): the share of draws meeting all four of (13a-d) at init against e per (L, T)
    (the margins themselves are -inf wherever alpha_0 = 0), and the rank of G^0 beside N d."""
    runs = _done(runs)
    if runs.empty:
        return []
    margins = ["th_margin_13a", "th_margin_13b", "th_margin_13c", "th_margin_13d"]
    met = (runs[margins].astype(float) >= 0).all(axis=1).astype(float)
    fig, axes = new_figure(1, 2, figsize=(11, 4.2))
    for i, ((depth, t), part) in enumerate(runs.assign(met=met).groupby(["depth", "T"])):
        med = part.groupby("e")["met"].mean()
        axes[0].plot(med.index, med.to_numpy(), "o-", color=line(i)["color"], label=f"L={depth}, T={t}")
        rank = part.groupby("e")["rank_g0"].median()
        axes[1].plot(rank.index, rank.to_numpy(), "o-", color=line(i)["color"], label=f"L={depth}, T={t}")
    nd = float((runs["n_problems"] * runs["d"]).iloc[0])
    axes[0].set(xscale="log", xlabel="e", ylabel="share of draws meeting (13a-d)", ylim=(-0.05, 1.05))
    axes[0].set_title("(13a-d) at init (Lemmas 5.1-5.4)")
    axes[1].axhline(nd, color="grey", ls=":", label="N d")
    axes[1].set(xscale="log", xlabel="e", ylabel="rank(G^0)", title="alpha_0 > 0 needs rank N d")
    axes[0].legend(ncols=2, title=MEDIAN_NOTE)
    axes[1].legend(ncols=2)
    return save_figure(fig, out_dir, f"{stem}_margins")


def _named(fn: Callable[[pd.DataFrame, pd.DataFrame, Path, str], list[Path]], stem: str) -> Figure:
    def draw(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
        return fn(runs, curves, out_dir, stem)

    draw.__doc__ = fn.__doc__
    return draw


_BY_GRID: dict[str, Callable[[pd.DataFrame, pd.DataFrame, Path, str], list[Path]]] = {
    "main": main_fig,
    "scales": main_fig,
    "scales_cpu": main_fig,
    "reference": main_fig,
    "ablation_e": ablation("e", "Fig. 10, ablation over e"),
    "ablation_lr": ablation("lr", "Fig. 11, ablation over the learning rate"),
    "theory_width": width,
    "theory_e": e_threshold,
    "lemma5_margins": lemma5,
}
FIGURES: dict[str, Figure] = {}
for _grid, _fn in _BY_GRID.items():
    FIGURES[_grid] = _named(_fn, _grid)
    FIGURES[f"small_{_grid}"] = _named(_fn, f"small_{_grid}")
