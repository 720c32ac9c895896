"""Figures of paper 003 (linear ResNets, Zou, Long & Gu 2020) from the store's frames.

Each function takes `runs` (one row per run: run_id, status, params, summary fields, flops, n_steps,
wall_s), `curves` (run_id, step, loss, subopt, rel_subopt, ...) and an output folder, and returns the
PNGs it wrote. Curves are medians over seeds with interquartile bands; losses on a log axis against
iterations, as in the paper; every median and quartile comes from analysis.aggregate, as the claims'
do. Only pandas, numpy and matplotlib: analysis never imports task code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analysis.aggregate import median, medians, never_as_inf, quartiles, seed_quartiles
from analysis.curve_plot import add_legend, draw_lines, seed_lines
from analysis.figures import Figure, save_figure
from analysis.load import finished
from analysis.style import color, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure as MplFigure

LOSS_LABEL = {"loss": "training loss $L(W)$", "subopt": "suboptimality $L(W) - L^*$"}
ITER_LABEL = "iteration t"
ITER_COLUMNS = {"iters_rel_1e2": "1e-2", "iters_rel_1e4": "1e-4", "iters_rel_1e6": "1e-6"}


# --------------------------------------------------------------------------------------- helpers
def _iter_line(
    ax: Axes,
    rows: pd.DataFrame,
    x: str,
    col: str,
    label: str,
    color: str,
    marker: str = "o",
    xcol: str | None = None,
) -> None:
    """Median (IQR error bars) of iterations-to-threshold against `x`; unreached medians are dropped
    and marked at the top of the axis with an open triangle."""
    pts = []
    for xv, grp in rows.groupby(x):
        # never reached (null; -1 in older stores) counts as +inf, as in the claims: a median of inf means
        # most seeds never got there.
        q25, q50, q75 = quartiles(never_as_inf(grp[col]))
        xpos = quartiles(grp[xcol])[1] if xcol else float(xv)
        pts.append((xpos, q25, q50, q75))
    if not pts:
        return
    arr = np.array(sorted(pts))
    ok = np.isfinite(arr[:, 2])
    hi = np.where(np.isfinite(arr[:, 3]), arr[:, 3], arr[:, 2])
    ax.errorbar(
        arr[ok, 0],
        arr[ok, 2],
        yerr=[arr[ok, 2] - arr[ok, 1], hi[ok] - arr[ok, 2]],
        label=label,
        color=color,
        marker=marker,
        capsize=3,
    )
    if (~ok).any():
        top = np.nanmax(arr[ok, 2]) * 1.5 if ok.any() else 1.0
        ax.plot(arr[~ok, 0], np.full((~ok).sum(), top), linestyle="none", marker="^", mfc="none", color=color)


def _ticks(ax: Axes, values: pd.Series) -> None:
    """Label a log x axis at the swept values (log axes otherwise show only powers of ten)."""
    vals = sorted({float(v) for v in values.dropna()})
    if vals:
        ax.set_xticks(vals, [f"{v:g}" for v in vals])
        ax.minorticks_off()


def _values(runs: pd.DataFrame, col: str) -> str:
    vals = sorted(runs[col].dropna().unique()) if col in runs else []
    return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in vals)


def _loss_panels(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    by: list[str],
    label: Callable[[dict[str, Any]], str],
    style: Callable[[dict[str, Any]], dict[str, Any]],
    references: list[tuple[float, dict[str, Any]]],
) -> MplFigure:
    """Fig. 1's two panels: the training loss (with the `references`, each a level and its line's style, as
    dotted horizontals inside its y range) and the suboptimality, against iterations, one line per `by` group."""
    fig, axes = new_figure(1, 2, figsize=(11, 4))
    levels = [level for level, _ in references]
    for col, ax in zip(["loss", "subopt"], axes, strict=True):
        lines = seed_lines(runs, curves, by, col, label=label, style=style)
        draw_lines(ax, lines, ITER_LABEL, LOSS_LABEL[col], legend=False, include=levels if col == "loss" else ())
        if col == "loss":
            for level, kw in references:
                ax.axhline(level, **kw)
        add_legend(ax, lines)
    return fig


# ------------------------------------------------------------------------------- Fig. 1 (a)-(b)
TRANSFORM_LABELS = {"identity": "identity", "modified_identity": "modified identity", "gaussian": "random (Gaussian)"}


def fig1_transforms(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str, title: str) -> list[Path]:
    """Training loss and loss - L* against iterations for the three transforms (L = 10)."""
    runs = finished(runs)
    if runs.empty:
        return []
    order = list(TRANSFORM_LABELS)
    fig = _loss_panels(
        runs,
        curves,
        ["transform"],
        label=lambda k: TRANSFORM_LABELS.get(k["transform"], str(k["transform"])),
        style=lambda k: {"color": color(order.index(k["transform"]) if k["transform"] in order else len(order))},
        references=[
            (median(runs["loss_star"]), {"color": "gray", "ls": ":", "label": "L* (least squares)"}),
            (median(runs["y_sq_half"]), {"color": "gray", "ls": "--", "lw": 0.8, "label": r"$\|Y\|^2 / 2$"}),
        ],
    )
    fig.suptitle(f"{title}: m = {_values(runs, 'm')}, L = {_values(runs, 'depth')}, c = {_values(runs, 'c')}")
    return save_figure(fig, out_dir, stem)


# ------------------------------------------------------------------------------- Fig. 1 (c)-(d)
def fig1_depth(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str, title: str) -> list[Path]:
    """ResNet (zero init) against the standard linear net (Gaussian init) over depth. The paper draws
    the ResNet at its largest L only ("quite similar for different L"); we draw it solid there and
    faint at the other depths so that the claim can be seen."""
    runs = finished(runs)
    if runs.empty:
        return []
    depths = sorted(runs["depth"].unique())
    largest = max(depths)

    def label(k: dict) -> str:
        if k["model"] == "standard":
            return f"standard net, L = {k['depth']}"
        return f"ResNet, L = {k['depth']}" if k["depth"] == largest else "_nolegend_"

    def style(k: dict) -> dict:
        if k["model"] == "standard":
            return {"color": color(depths.index(k["depth"])), "linestyle": "--"}
        if k["depth"] == largest:
            return {"color": "black", "linewidth": 2.0, "linestyle": "-"}
        return {"color": color(depths.index(k["depth"])), "linewidth": 0.8, "alpha": 0.5, "linestyle": "-"}

    references = [(median(runs["loss_star"]), {"color": "gray", "ls": ":", "label": "L*"})]
    fig = _loss_panels(runs, curves, ["model", "depth"], label=label, style=style, references=references)
    fig.suptitle(f"{title}: m = {_values(runs, 'm')}, c = {_values(runs, 'c')} (eta ~ 1/L); faint: ResNet at smaller L")
    return save_figure(fig, out_dir, stem)


# ------------------------------------------------------------------------------------- sweeps
def _step_groups(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Split a depth sweep into its two step rules: a constant c (eta ~ 1/L) and a constant c/L (the
    same eta at every depth). A cell can belong to both (where c = (c/L) L), as in the grid."""
    c0 = rows["c"].mode().iloc[0]
    out = {f"c = {c0:g} (eta ~ 1/L)": rows[np.isclose(rows["c"], c0)]}
    ratio = rows["c"] / rows["depth"]
    other = rows[~np.isclose(rows["c"], c0)]
    if not other.empty:
        r0 = (other["c"] / other["depth"]).mode().iloc[0]
        out[f"c / L = {r0:g} (eta fixed)"] = rows[np.isclose(ratio, r0)]
    return out


def sweep_depth(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str = "sweep_depth") -> list[Path]:
    """Iterations to a relative suboptimality of 1e-6 against depth, per model and width."""
    runs = finished(runs)
    if runs.empty:
        return []
    groups = _step_groups(runs)
    fig, axes = new_figure(1, len(groups), figsize=(5.5 * len(groups), 4), squeeze=False)
    for ax, (title, rows) in zip(axes[0], groups.items(), strict=True):
        for i, ((model, m), grp) in enumerate(rows.groupby(["model", "m"])):
            _iter_line(
                ax,
                grp,
                "depth",
                "iters_rel_1e6",
                f"{model}, m = {m}",
                color(i),
                marker="o" if model == "resnet" else "s",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        _ticks(ax, rows["depth"])
        ax.set_xlabel("depth L")
        ax.set_ylabel("iterations to (L - L*) / (L0 - L*) <= 1e-6")
        ax.set_title(title + "; open triangle: not reached / diverged")
        ax.legend()
    return save_figure(fig, out_dir, stem)


def sweep_width(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str = "sweep_width") -> list[Path]:
    """Iterations to 1e-6 and the final relative suboptimality against the width m."""
    runs = finished(runs)
    if runs.empty:
        return []
    fig, axes = new_figure(1, 2, figsize=(11, 4))
    keys = ["transform", "model", "depth"]
    for i, (key, grp) in enumerate(runs.groupby(keys)):
        transform, model, depth = key
        label = f"{model}, L = {depth}" + ("" if transform == "gaussian" else f", {transform}")
        marker = "o" if model == "resnet" else "s"
        _iter_line(axes[0], grp, "m", "iters_rel_1e6", label, color(i), marker=marker)
        med = seed_quartiles(grp, ["m"], "rel_subopt_final").set_index("m")["median"]
        axes[1].plot(med.index, med.clip(lower=1e-17), marker=marker, color=color(i), label=label)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        _ticks(ax, runs["m"])
        ax.set_xlabel("width m")
    axes[0].set_ylabel("iterations to relative suboptimality 1e-6")
    axes[1].set_ylabel("final (L - L*) / (L0 - L*) (median)")
    axes[0].legend()
    fig.suptitle(f"Width sweep: n_iters = {_values(runs, 'n_iters')}, c = {_values(runs, 'c')}")
    return save_figure(fig, out_dir, stem)


def sweep_kappa(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str = "sweep_kappa") -> list[Path]:
    """Iterations to 1e-6 against kappa(X X^T), log-log, with the fitted slope (theory: 1)."""
    runs = finished(runs)
    if runs.empty:
        return []
    fig, ax = new_figure(figsize=(6, 4.5))
    for i, (model, grp) in enumerate(runs.groupby("model")):
        # seed medians as in the claim 003.cor34.kappa (unreached = inf), fitted where finite
        ys = medians(grp, ["kappa"], "iters_rel_1e6")
        xs = seed_quartiles(grp, ["kappa"], "kappa_x").set_index("kappa")["median"].reindex(ys.index)
        fit = np.isfinite(ys) & (ys > 0)
        slope = np.polyfit(np.log(xs[fit]), np.log(ys[fit]), 1)[0] if fit.sum() >= 2 else np.nan
        _iter_line(
            ax,
            grp,
            "kappa",
            "iters_rel_1e6",
            f"{model} (slope {slope:.2f})",
            color(i),
            marker="o" if model == "resnet" else "s",
            xcol="kappa_x",
        )
    kx = runs["kappa_x"]
    ref = np.array([kx.min(), kx.max()])
    iters = never_as_inf(runs["iters_rel_1e6"])
    base = iters[np.isfinite(iters) & (iters > 0)].min()
    if np.isfinite(base):
        ax.plot(ref, base * ref / ref[0], color="gray", ls=":", label="slope 1 (Cor. 3.4)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("kappa = ||X||^2 / sigma_r^2(X)")
    ax.set_ylabel("iterations to relative suboptimality 1e-6")
    ax.legend()
    ax.set_title(f"m = {_values(runs, 'm')}, L = {_values(runs, 'depth')}, c = {_values(runs, 'c')}")
    return save_figure(fig, out_dir, stem)


def sweep_sgd_batch(
    runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str = "sweep_sgd_batch"
) -> list[Path]:
    """Left: SGD's final excess loss against the batch size B when L* > 0, per c, with an n/B guide.
    Right: loss - L* against iterations when L* = 0 (noise 0), one line per B."""
    runs = finished(runs)
    if runs.empty:
        return []
    noisy, exact = runs[runs["noise"] > 0], runs[runs["noise"] == 0]
    fig, axes = new_figure(1, 2, figsize=(11, 4))
    ax = axes[0]
    for i, (c, grp) in enumerate(noisy.groupby("c")):
        q = seed_quartiles(grp, ["batch_size"], "subopt_tail").set_index("batch_size")
        ax.errorbar(
            q.index,
            q["median"],
            yerr=[q["median"] - q["q25"], q["q75"] - q["median"]],
            marker="o",
            capsize=3,
            color=color(i),
            label=f"c = {c:g}",
        )
        # Gradient noise of B samples drawn without replacement scales as (n - B) / B.
        n = float(grp["n"].iloc[0])
        bs = q.index[q.index < n].to_numpy(dtype=float)
        if bs.size:
            b0 = bs.min()
            ax.plot(bs, q["median"].loc[b0] * ((n - bs) / bs) / ((n - b0) / b0), color=color(i), ls=":", lw=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    _ticks(ax, noisy["batch_size"])
    ax.set_xlabel("batch size B")
    ax.set_ylabel("loss - L*, mean over the last 20% (median, IQR)")
    ax.set_title("L* > 0: stalls at an excess ~ eta (n - B) / B (dotted guide)")
    if not noisy.empty:
        ax.legend()
    ax = axes[1]
    lines = seed_lines(exact, curves, ["batch_size"], "subopt", label=lambda k: f"B = {k['batch_size']}")
    draw_lines(ax, lines, ITER_LABEL, LOSS_LABEL["subopt"], legend=bool(lines))
    ax.set_title("L* = 0 (noise 0): linear convergence of the last iterate (Thm 3.8)")
    fig.suptitle(f"SGD: n = {_values(runs, 'n')}, m = {_values(runs, 'm')}, L = {_values(runs, 'depth')}")
    return save_figure(fig, out_dir, stem)


def _panel(draw: Callable[[pd.DataFrame, pd.DataFrame, Path, str, str], list[Path]], stem: str, title: str) -> Figure:
    """One of Fig. 1's four figures: `draw` with its title, into the file `stem` (a small twin names its own)."""

    def figure(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str = stem) -> list[Path]:
        return draw(runs, curves, out_dir, stem, title)

    figure.__name__ = stem.split("_")[0]
    return figure


fig1a = _panel(fig1_transforms, "fig1a_transforms_m40", "Fig. 1(a) transforms")
fig1b = _panel(fig1_transforms, "fig1b_transforms_m200", "Fig. 1(b) transforms")
fig1c = _panel(fig1_depth, "fig1c_depth_m40", "Fig. 1(c) ResNet vs standard net")
fig1d = _panel(fig1_depth, "fig1d_depth_m200", "Fig. 1(d) ResNet vs standard net")


def _named(fn: Callable[..., list[Path]], stem: str) -> Figure:
    def figure(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
        return fn(runs, curves, out_dir, stem=stem)

    figure.__name__ = f"{fn.__name__}_{stem}"
    return figure


FIGURES: dict[str, Figure] = {
    "fig1a_transforms_m40": fig1a,
    "fig1b_transforms_m200": fig1b,
    "fig1c_depth_m40": fig1c,
    "fig1d_depth_m200": fig1d,
    "sweep_depth": sweep_depth,
    "sweep_width": sweep_width,
    "sweep_kappa": sweep_kappa,
    "sweep_sgd_batch": sweep_sgd_batch,
    # The small grids of grids/linear_resnet/small (same figures, their own file names).
    "small_fig1a_transforms_m40": _named(fig1a, "small_fig1a_transforms_m40"),
    "small_fig1b_transforms_m200": _named(fig1b, "small_fig1b_transforms_m200"),
    "small_fig1c_depth_m40": _named(fig1c, "small_fig1c_depth_m40"),
    "small_fig1d_depth_m200": _named(fig1d, "small_fig1d_depth_m200"),
    "small_sweep_depth": _named(sweep_depth, "small_sweep_depth"),
    "small_sweep_width": _named(sweep_width, "small_sweep_width"),
    "small_sweep_kappa": _named(sweep_kappa, "small_sweep_kappa"),
    "small_sweep_sgd_batch": _named(sweep_sgd_batch, "small_sweep_sgd_batch"),
}
