"""Figures of paper 004 (backward feature correction) on the synthetic protocol of spec 3.10.

The paper's own figures are CIFAR-only; each figure here is the synthetic analogue of one claim of
spec 4 (C1-C12), drawn from the store's frames: medians over seeds with interquartile ranges, errors
on log axes. Only pandas, numpy and matplotlib: analysis never imports task code.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analysis.curve_plot import draw_lines, seed_lines
from analysis.figures import Figure, save_figure
from analysis.load import finished
from analysis.style import ERRORBAR_NOTE, color, new_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def _quartiles(runs: pd.DataFrame, keys: list[str], col: str) -> pd.DataFrame:
    """Per group: 25/50/75% of `col` over seeds (inf, e.g. a diverged run, counts as the worst)."""
    values = runs[col].astype(float).replace(np.nan, np.inf)
    g = values.groupby([runs[k] for k in keys])
    out = pd.DataFrame({"q25": g.quantile(0.25), "q50": g.median(), "q75": g.quantile(0.75), "n": g.size()})
    return out.reset_index()


def _errorbars(ax: Axes, q: pd.DataFrame, x: str, label: str, color: str, **kw: object) -> None:
    q = q.sort_values(x)
    q = q[np.isfinite(q["q50"]) & (q["q50"] > 0)]
    if q.empty:
        return
    lo, hi = (q["q50"] - q["q25"]).clip(lower=0), (q["q75"] - q["q50"]).clip(lower=0)
    ax.errorbar(q[x], q["q50"], yerr=[lo, hi], label=label, color=color, marker="o", capsize=3, **kw)  # type: ignore[arg-type]  # matplotlib's stubs type **kwargs narrowly


def _cells(runs: pd.DataFrame, cols: list[str]) -> list[tuple[object, ...]]:
    present = [c for c in cols if c in runs]
    return sorted({tuple(r) for r in runs[present].itertuples(index=False)}, key=str)


def _protocol_style(gammas: list) -> Callable[[dict], dict]:
    """A colour per gamma (as in the panel above), solid for joint training, dashed for layer-wise."""

    def style(key: dict) -> dict:
        return {"color": color(gammas.index(key["gamma"])), "linestyle": "-" if key["protocol"] == "joint" else "--"}

    return style


# ------------------------------------------------------------------------------------- C1 / C2
def c1_joint_vs_layerwise(
    runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, stem: str = "c1_joint_vs_layerwise"
) -> list[Path]:
    """Left: test MSE after each layer is added (mse_after_l*) and at the end, joint vs layer-wise, one
    panel per (L, dist); lines per gamma. Right: the layer-2 feature error along training (BFC, C2)."""
    runs = finished(runs)
    cells = _cells(runs, ["L", "dist"])
    fig, axes = new_figure(2, max(len(cells), 1), figsize=(4.2 * max(len(cells), 1), 7.0), squeeze=False)
    drawn_below = curves is not None and not curves.empty and "fe_orth_l2_t" in curves  # its legend serves both
    for col, (depth_key, dist) in enumerate(cells):
        depth = int(str(depth_key))
        sub = runs[(runs["L"] == depth) & (runs["dist"] == dist)]
        ax = axes[0][col]
        for i, gamma in enumerate(sorted(sub["gamma"].unique())):
            for proto, style in (("joint", "-"), ("layerwise", "--")):
                part = sub[(sub["gamma"] == gamma) & (sub["protocol"] == proto)]
                if part.empty:
                    continue
                stages = [f"mse_after_l{top}" for top in range(2, depth + 1)] + ["test_mse"]
                med = [float(part[s].astype(float).median()) for s in stages]
                ax.plot(
                    range(len(stages)),
                    med,
                    style,
                    marker="o",
                    color=color(i),
                    label=f"γ = {gamma:g}, {proto}",
                )
        ax.set_xticks(range(depth), [f"after {top}" for top in range(2, depth + 1)] + ["final"])
        ax.set_xlabel("training stage (layers trained so far)")
        ax.set_yscale("log")
        ax.set_ylabel("test MSE / Var(y) (median over seeds)")
        ax.set_title(f"C1: L = {depth}, {dist} inputs")
        if col == 0 and not drawn_below:  # every panel draws the same (γ, protocol) lines: one legend
            ax.legend()
        ax = axes[1][col]
        if curves is not None and not curves.empty and "fe_orth_l2_t" in curves:
            # before K_2 is distilled the error is exactly 1: those epochs say nothing about BFC
            distilled = curves[curves["fe_orth_l2_t"] < 1.0]
            lines = seed_lines(
                sub,
                distilled,
                ["gamma", "protocol"],
                "fe_orth_l2_t",
                label=lambda k: f"γ = {k['gamma']:g}, {k['protocol']}",
                style=_protocol_style(sorted(sub["gamma"].unique())),
            )
            draw_lines(ax, lines, "epoch", "layer-2 feature error $fe_2$ (orthogonal Procrustes)", legend=col == 0)
        ax.set_title("C2: layer-2 features along training")
    fig.suptitle("Joint (solid) against layer-wise (dashed) training: test error after each stage, feature error")
    return save_figure(fig, out_dir, stem)


def c3_gap_sweep(runs: pd.DataFrame, _: pd.DataFrame, out_dir: Path, stem: str = "c3_gap_sweep") -> list[Path]:
    runs = finished(runs)
    fig, ax = new_figure(figsize=(5, 4))
    q = _quartiles(runs, ["gamma"], "fe2_after_l2")
    _errorbars(ax, q, "gamma", "measured fe_2 after stage 2", color(0))
    proto = pd.DataFrame({"gamma": [0.1, 0.3, 1.0], "fe": [0.0036, 0.0174, 0.114]})
    ax.plot(proto["gamma"], proto["fe"], "s:", color="gray", label="spec prototype (1 seed)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("information gap γ = α₃ / α₂")
    ax.set_ylabel("fe_2 right after stage 2")
    ax.set_title("C3: over-fitting of layer 2 grows with the gap")
    ax.legend(title=ERRORBAR_NOTE)
    return save_figure(fig, out_dir, stem)


def _window(runs: pd.DataFrame) -> pd.Series:
    depth = runs["L"].astype(int)
    w = runs["window"].astype(float) if "window" in runs else pd.Series(np.nan, index=runs.index)
    return pd.Series(
        np.where(runs["protocol"] == "layerwise", 0, np.where(runs["protocol"] == "joint", depth - 2, w)),
        index=runs.index,
    )


def c4_window(runs: pd.DataFrame, _: pd.DataFrame, out_dir: Path, stem: str = "c4_window") -> list[Path]:
    runs = finished(runs).copy()
    runs["w"] = _window(runs)
    fig, ax = new_figure(figsize=(5, 4))
    for i, col in enumerate(("test_mse", "fe_orth_l2", "fe_orth_l3")):
        _errorbars(ax, _quartiles(runs, ["w"], col), "w", col, color(i))
    ax.plot([0, 1, 2], [0.0488, 0.0068, 0.0014], "s:", color="gray", label="spec prototype test MSE (L=4)")
    ax.set_yscale("log")
    ax.set_xlabel("window w (layers l-w..l train at stage l)")
    ax.set_title("C4: how deep BFC must go")
    ax.legend(title=ERRORBAR_NOTE)
    return save_figure(fig, out_dir, stem)


def _bars(ax: Axes, runs: pd.DataFrame, key: str, cols: list[str]) -> None:
    labels = sorted(runs[key].astype(str).unique())
    width = 0.8 / max(len(cols), 1)
    for i, col in enumerate(cols):
        q = _quartiles(runs.assign(_k=runs[key].astype(str)), ["_k"], col).set_index("_k").reindex(labels)
        x = np.arange(len(labels)) + i * width
        ax.bar(
            x,
            q["q50"],
            width,
            label=col,
            color=color(i),
            yerr=[(q["q50"] - q["q25"]).clip(lower=0), (q["q75"] - q["q50"]).clip(lower=0)],
        )
    ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels)
    ax.legend(title="bars: median over seeds, whiskers: IQR")


def c5_locality(runs: pd.DataFrame, _: pd.DataFrame, out_dir: Path, stem: str = "c5_locality") -> list[Path]:
    runs = finished(runs).copy()
    runs["cell"] = runs["optimizer"].astype(str) + " m=" + runs["m"].astype(str)
    fig, ax = new_figure(figsize=(6, 4))
    _bars(ax, runs, "cell", ["wcorr_w2_pre_post", "wcorr_w2_init_final", "wcorr_k2_pre_post", "wgram_change_w2"])
    ax.set_title("C5: neuron-wise cosine of W_2 / K_2 rows, after stage 2 vs final (paper: > 0.9)")
    return save_figure(fig, out_dir, stem)


def c6_kernels(runs: pd.DataFrame, _: pd.DataFrame, out_dir: Path, stem: str = "c6_kernels") -> list[Path]:
    runs = finished(runs).copy()
    kernel = runs["kernel"].astype(str) if "kernel" in runs else pd.Series("", index=runs.index)
    degree = runs["degree"] if "degree" in runs else pd.Series(np.nan, index=runs.index)
    runs["method"] = np.where(
        runs["learner"] == "kernel",
        kernel + np.where(kernel == "poly", " p=" + degree.astype(str).str.replace(".0", "", regex=False), ""),
        "network (joint K/W)",
    )
    fig, ax = new_figure(figsize=(5.5, 4))
    for i, method in enumerate(sorted(runs["method"].unique())):
        _errorbars(
            ax,
            _quartiles(runs[runs["method"] == method], ["n_train"], "test_mse"),
            "n_train",
            method,
            color(i),
        )
    ax.plot([2000, 8000], [0.619, 0.291], "s:", color="gray", label="spec prototype poly p=4")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ns = sorted(int(n) for n in runs["n_train"].unique())
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.minorticks_off()
    ax.set_xlabel("n (training samples)")
    ax.set_ylabel("test MSE / Var(y)")
    ax.set_title("C6: kernels need far more samples")
    ax.legend(title=ERRORBAR_NOTE)
    return save_figure(fig, out_dir, stem)


def _simple(key: str, cols: list[str], title: str, logx: bool = False) -> Callable[..., list[Path]]:
    def figure(runs: pd.DataFrame, _: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
        runs = finished(runs)
        fig, ax = new_figure(figsize=(5, 4))
        for i, col in enumerate(cols):
            _errorbars(ax, _quartiles(runs, [key], col), key, col, color(i))
        ax.set_yscale("log")
        if logx:
            ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlabel(key)
        ax.set_title(title)
        ax.legend(title=ERRORBAR_NOTE)
        return save_figure(fig, out_dir, stem)

    return figure


def _categorical(key: str, cols: list[str], title: str) -> Callable[..., list[Path]]:
    def figure(runs: pd.DataFrame, _: pd.DataFrame, out_dir: Path, stem: str) -> list[Path]:
        runs = finished(runs)
        keys = [k for k in ("L", key) if k in runs and runs[k].nunique() > 1] or [key]
        runs = runs.assign(cell=runs[keys].astype(str).agg(" ".join, axis=1))
        fig, ax = new_figure(figsize=(6, 4))
        _bars(ax, runs, "cell", cols)
        ax.set_yscale("log")
        ax.set_title(title)
        return save_figure(fig, out_dir, stem)

    return figure


def _named(fn: Callable[..., list[Path]], stem: str) -> Figure:
    def figure(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
        return fn(runs, curves, out_dir, stem=stem)

    figure.__name__ = f"fig_{stem}"
    return figure


_BASE: dict[str, Callable[..., list[Path]]] = {
    "c1_joint_vs_layerwise": c1_joint_vs_layerwise,
    "c3_gap_sweep": c3_gap_sweep,
    "c4_window": c4_window,
    "c5_locality": c5_locality,
    "c6_kernels": c6_kernels,
    "c7_overparam": _simple("m", ["test_mse", "fe_orth_l2"], "C7: width of the W-path (spec: prototype m=6 ~ m=64)"),
    "c8_distill": _simple(
        "lam_mult",
        ["test_mse", "fe_orth_l2", "fe_lin_l2"],
        "C8: distillation strength (prototype lam=0: fe_2 orth 1.05, lin 0.026)",
        logx=True,
    ),
    "c9_staging": _categorical("protocol", ["test_mse", "fe_orth_l2"], "C9: staged (joint) vs all from start"),
    "c10_gap_needed": _simple("gamma", ["test_mse", "fe_orth_l2", "fe_orth_l3"], "C10: joint at L = 4 vs gamma"),
    "c11_truncation": _simple(
        "trunc_b",
        ["trunc_gap", "test_mse", "test_mse_trunc"],
        "C11: truncated training activation: E(F - F~)^2 / Var(y)",
    ),
    "c12_densenet": _categorical("activation", ["test_mse", "train_mse"], "C12: plain DenseNet by activation"),
}
# issue 43: the claims' own parts of c5_locality and c8_distill (the same runs), drawn as their parents
_BASE["c5_locality_adam"] = _BASE["c5_locality"]
_BASE["c8_distill_default"] = _BASE["c8_distill"]

FIGURES: dict[str, Figure] = {
    **{name: _named(fn, name) for name, fn in _BASE.items()},
    **{f"small_{name}": _named(fn, f"small_{name}") for name, fn in _BASE.items()},
}
