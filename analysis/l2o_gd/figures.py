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

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.figures import save_figure

Figure = Callable[[pd.DataFrame, pd.DataFrame, Path], list[Path]]
COLORS = [plt.get_cmap("tab10")(i) for i in range(10)] + [plt.get_cmap("Dark2")(i) for i in range(8)]  # 18 lines


def _done(runs: pd.DataFrame) -> pd.DataFrame:
    out = runs[runs["status"].isin(["ok", "diverged"])] if "status" in runs else runs
    return out[out["algo"] == "l2o"] if "algo" in out else out


def _label(key: tuple | str, names: list[str]) -> str:
    vals = key if isinstance(key, tuple) else (key,)
    return ", ".join(f"{n}={v:g}" if isinstance(v, float) else f"{n}={v}" for n, v in zip(names, vals, strict=True))


def _varying(runs: pd.DataFrame, candidates: list[str]) -> list[str]:
    keys = [c for c in candidates if c in runs and runs[c].astype(str).nunique() > 1]
    return keys or [candidates[0]]


GROUP_CANDIDATES = ["d", "b", "n_problems", "n1", "n2", "data", "e", "lr", "depth", "T", "dtype"]


def _quantiles(runs: pd.DataFrame, curves: pd.DataFrame, keys: list[str], col: str) -> pd.DataFrame:
    merged = curves[["run_id", "step", col]].merge(runs[["run_id", *keys]], on="run_id")
    merged = merged.replace([np.inf, -np.inf], np.nan).dropna(subset=[col])
    if merged.empty:
        return pd.DataFrame(columns=[*keys, "step", "q25", "q50", "q75"])
    q = merged.groupby([*keys, "step"])[col].quantile([0.25, 0.5, 0.75]).unstack()
    q.columns = ["q25", "q50", "q75"]
    return q.reset_index()


def _curves_by_group(ax: plt.Axes, runs: pd.DataFrame, curves: pd.DataFrame, keys: list[str], col: str) -> None:
    q = _quantiles(runs, curves, keys, col)
    for i, (key, part) in enumerate(q.groupby(keys)):
        part = part.sort_values("step")
        color = COLORS[i % len(COLORS)]
        ax.plot(part["step"], part["q50"], color=color, label=_label(key, keys))
        ax.fill_between(part["step"], part["q25"], part["q75"], color=color, alpha=0.2, linewidth=0)


def training(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """Figs. 3 and 5 (and 6a-9a): F(X_T^k) and the improvement ratios against the training step k."""
    runs = _done(runs)
    if runs.empty or curves.empty:
        return []
    keys = _varying(runs, GROUP_CANDIDATES)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    _curves_by_group(axes[0], runs, curves, keys, "loss")
    for i, (_key, part) in enumerate(runs.groupby(keys)):
        color = COLORS[i % len(COLORS)]
        axes[0].axhline(part["F_T_gd"].median(), color=color, ls="--", lw=1)
        axes[0].axhline(part["F_T_opt"].median(), color=color, ls=":", lw=1)
    axes[0].set(
        yscale="log",
        xlabel="training step k",
        ylabel="F(X_T^k)",
        title="last objective (dashed: GD 1/beta, dotted: GD 2/(beta+beta0))",
    )
    for ax, col, what in ((axes[1], "imp_last", "r_T (last iterate)"), (axes[2], "imp_mean", "mean_t r_t")):
        _curves_by_group(ax, runs, curves, keys, col)
        base = "imp_last" if col == "imp_last" else "imp_mean"
        for i, (_, part) in enumerate(runs.groupby(keys)):
            color = COLORS[i % len(COLORS)]
            ax.axhline(part[f"{base}_opt"].median(), color=color, ls=":", lw=1)
            if f"{base}_best_c" in part and part[f"{base}_best_c"].notna().any():
                ax.axhline(part[f"{base}_best_c"].median(), color=color, ls="-.", lw=1)
        ax.axhline(0.5, color="grey", lw=0.8)
        ax.set(xlabel="training step k", ylabel=what, title=f"improvement over GD: {what}")
        lo = min(-0.1, float(np.nanquantile(curves[col].replace([np.inf, -np.inf], np.nan), 0.05)))
        ax.set_ylim(max(lo, -2.0), 1.05)
    axes[1].legend(fontsize=7, title="dotted 2/(b+b0), dash-dot best c", title_fontsize=7)
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
    groups = list(runs.sort_values("seed").groupby(keys))[:6]
    fig, axes = plt.subplots(1, len(groups), figsize=(5 * len(groups), 4.2), squeeze=False)
    for ax, (key, part) in zip(axes[0], groups, strict=True):
        run = part.iloc[0]
        text = run["traj_checkpoints"]
        saved = json.loads(text) if isinstance(text, str) and text else {}
        cmap = plt.get_cmap("viridis", max(len(saved), 2))
        for j, k in enumerate(sorted(saved, key=int)):
            tr = np.array([np.nan if v is None else v for v in saved[k]], dtype=float)
            ax.plot(np.arange(tr.size), tr, color=cmap(j), lw=1, label=f"k={k}")
        for col, ls, name in (("traj_gd", "--", "GD 1/beta"), ("traj_opt", ":", "GD 2/(b+b0)")):
            base = _traj(run.get(col))
            if base is not None:
                ax.plot(np.arange(base.size), base, color="black", ls=ls, lw=1.2, label=name)
        ax.set(yscale="log", xlabel="GD iteration t", ylabel="F(X_t)", title=_label(key, keys))
        ax.legend(fontsize=6, ncol=2)
    return save_figure(fig, out_dir, f"{stem}_trajectories")


def final_vs(runs: pd.DataFrame, out_dir: Path, stem: str, x: str, title: str) -> list[Path]:
    """Figs. 10-11: the final r_T and mean_t r_t against `x`, one line per other varying key."""
    runs = _done(runs)
    if runs.empty or x not in runs:
        return []
    keys = [k for k in _varying(runs, GROUP_CANDIDATES) if k != x] or ["d"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, col in zip(axes, ("imp_last", "imp_mean"), strict=True):
        for i, (key, part) in enumerate(runs.groupby(keys)):
            med = part.groupby(x)[col].median()
            color = COLORS[i % len(COLORS)]
            ax.plot(med.index.astype(float), med.to_numpy(), "o-", color=color, label=_label(key, keys))
            ax.axhline(part[f"{col}_opt"].median(), color=color, ls=":", lw=1)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set(xscale="log", xlabel=x, ylabel=col, title=f"{title}: {col} (dotted: 2/(beta+beta0))")
        ax.set_ylim(max(-2.0, min(-0.1, float(runs[col].min()) - 0.05)), 1.05)
        ax.legend(fontsize=7)
    return save_figure(fig, out_dir, f"{stem}_final_vs_{x}")


def width(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """C6: rank and alpha_0 of G_{L-1,T} against n2 (K = N d marked), and C3-C5 ratios."""
    runs = _done(runs)
    if runs.empty:
        return []
    k = float((runs["n_problems"] * runs["d"]).iloc[0])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    med = runs.groupby("n2")[["rank_g0", "rank_g_final", "alpha0_thin", "sigma_max_g0"]].median()
    n2 = med.index.astype(float)
    axes[0].plot(n2, med["rank_g0"] / np.minimum(n2, k), "o-", label="rank(G^0) / min(n2, Nd)")
    axes[0].plot(n2, med["rank_g_final"] / np.minimum(n2, k), "s--", label="rank(G^final) / min(n2, Nd)")
    axes[0].axvline(k, color="grey", ls=":", label="n2 = Nd")
    axes[0].set(xscale="log", xlabel="n2", ylabel="relative rank", title="G_{L-1,T} is rank deficient (C6)")
    axes[0].legend(fontsize=7)
    axes[1].plot(n2, (med["alpha0_thin"] / med["sigma_max_g0"]).clip(lower=1e-300), "o-", label="alpha_0 / sigma_max")
    axes[1].set(xscale="log", yscale="log", xlabel="n2", title="alpha_0 relative to sigma_max (C6)")
    axes[1].legend(fontsize=7)
    out = save_figure(fig, out_dir, f"{stem}_rank")
    return out + training(runs, curves, out_dir, stem)


def e_threshold(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """C8: final r_T against e for each (depth, T)."""
    runs = _done(runs)
    if runs.empty:
        return []
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, ((depth, t), part) in enumerate(runs.groupby(["depth", "T"])):
        med = part.groupby("e")["imp_last"].median()
        axes[0].plot(
            med.index,
            med.clip(lower=1e-6).to_numpy(),
            marker="o",
            color=COLORS[i % len(COLORS)],
            ls=["-", "--", ":", "-."][int(depth) % 4],
            label=f"L={depth}, T={t}",
        )
        eff = part.groupby("eta_eff")["imp_last"].median()
        axes[1].plot(eff.index, eff.clip(lower=1e-6).to_numpy(), "o", color=COLORS[i % len(COLORS)])
    axes[0].set(xscale="log", yscale="log", xlabel="e", ylabel="r_T (clipped at 1e-6)", title="improvement vs e (C8)")
    axes[0].legend(fontsize=6, ncol=2)
    axes[1].set(xscale="log", yscale="log", xlabel="lr e^{2(L-1)}", title="the same against eta_eff (spec G6)")
    return save_figure(fig, out_dir, f"{stem}_e_threshold")


def learned_steps(runs: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
    """The learned multiplier P_t (mean over coordinates, final epoch) against t, beside the constant
    multipliers: 1 (GD with 1/beta), 2 beta/(beta+beta0) and the best scanned c."""
    runs = _done(runs)
    if runs.empty or "p_mean_t_final" not in runs:
        return []
    keys = _varying(runs, GROUP_CANDIDATES)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, (key, part) in enumerate(runs.groupby(keys)):
        rows = [json.loads(t) for t in part["p_mean_t_final"] if isinstance(t, str) and t]
        if not rows:
            continue
        med = np.nanmedian(np.array([[np.nan if v is None else v for v in r] for r in rows], dtype=float), axis=0)
        color = COLORS[i % len(COLORS)]
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
    ax.legend(fontsize=7)
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
}
FIGURES: dict[str, Figure] = {}
for _grid, _fn in _BY_GRID.items():
    FIGURES[_grid] = _named(_fn, _grid)
    FIGURES[f"small_{_grid}"] = _named(_fn, f"small_{_grid}")
