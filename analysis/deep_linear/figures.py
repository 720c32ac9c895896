"""Figures of paper 002 (Shin, layer-wise BCGD for deep linear networks) from result frames.

Every function takes `runs` (one row per run: run_id, status, one column per param and per summary
field, flops, n_steps, wall_s) and `curves` (run_id, step and the task's curve columns: err, loss,
lr, layer, sweep, flops), writes PNGs into `out_dir` and returns their paths. Seeds are aggregated
by the median with an interquartile band (analysis.aggregate); errors are clipped at the paper's 1e-10 floor and drawn
on log axes, against sweeps and iterations as the paper does, plus a per-flop panel (spec G11).
Only pandas, numpy and matplotlib are used, so the module does not depend on the runner.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.aggregate import band
from analysis.aggregate import median_table as _median_table
from analysis.figures import Figure, save_figure
from tasks.status import FINAL_STATUSES

FLOOR = 1e-10  # "if the error is less than 1e-10, we simply set 1e-10" (Sec. 4)
XLABEL = {"sweep": "number of sweeps", "step": "number of iterations", "flops": "flops (learner, covariance form)"}
DONE = tuple(sorted(FINAL_STATUSES))


def _hashable(v: Any) -> Any:
    if isinstance(v, (list, tuple, np.ndarray)):
        return tuple(int(u) if float(u).is_integer() else float(u) for u in v)
    return v


def _prep_runs(runs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    out = runs[runs["status"].isin(DONE)].copy()
    for col in by:
        if col not in out:
            out[col] = None
        out[col] = out[col].map(_hashable).astype(object)
    return out


def series(runs: pd.DataFrame, curves: pd.DataFrame, by: list[str], x: str = "step") -> list[tuple[dict, pd.DataFrame]]:
    """Per group of `by`: x (median over seeds of the x column at each step) and the median, 25% and
    75% quantiles of the clipped error over the runs of that group."""
    r = _prep_runs(runs, by)
    # curve columns only: "lr" and "flops" are also run columns (the GD step, the run's total)
    cur = curves[list(dict.fromkeys(["run_id", "step", "err", x]))].merge(r[["run_id", *by]], on="run_id")
    out: list[tuple[dict, pd.DataFrame]] = []
    if cur.empty:
        return out
    for key, g in cur.groupby(by, dropna=False, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        # A diverged step (inf) is missing in the band; errors below the paper's floor sit on it.
        err = band(g.assign(err=g["err"].clip(lower=FLOOR)), ["step"], "err")
        xs = err["step"] if x == "step" else band(g, ["step"], x)["median"]
        statuses = r.loc[r["run_id"].isin(g["run_id"].unique()), "status"]
        stats = pd.DataFrame(
            {
                "x": xs.to_numpy(),
                "med": err["median"].to_numpy(),
                "q25": err["q25"].to_numpy(),
                "q75": err["q75"].to_numpy(),
                "n": err["n"].to_numpy(),
                "n_diverged": int((statuses == "diverged").sum()),
            }
        )
        out.append((dict(zip(by, key, strict=True)), stats))
    return out


def _plot(
    ax: Any,
    items: list[tuple[dict, pd.DataFrame]],
    label: Callable[[dict], str],
    style: Callable[[dict], dict] | None = None,
) -> None:
    top = 0.0
    for key, s in items:
        kw = style(key) if style else {}
        name = label(key) + (" (diverged)" if s["n_diverged"].iloc[0] else "")
        (line,) = ax.semilogy(s["x"], s["med"], label=name, **kw)
        if (s["n"] > 1).any():
            ax.fill_between(s["x"], s["q25"], s["q75"], color=line.get_color(), alpha=0.2, linewidth=0)
        top = max(top, float(s["med"].iloc[0]))
    if top > 0:  # diverging runs leave the plot upwards instead of squashing every other curve
        ax.set_ylim(FLOOR / 3, 30 * top)
    if not items:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("error to the optimum")
    ax.grid(True, which="major", alpha=0.3)
    if items:
        ax.legend(fontsize=7)


def _panels(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    by: list[str],
    xs: list[str],
    title: str,
    label: Callable[[dict], str],
    style: Callable[[dict], dict] | None,
    out_dir: Path,
    name: str,
) -> list[Path]:
    fig, axes = plt.subplots(1, len(xs), figsize=(4.6 * len(xs), 3.8), squeeze=False)
    for ax, x in zip(axes[0], xs, strict=True):
        _plot(ax, series(runs, curves, by, x), label, style)
        ax.set_xlabel(XLABEL[x])
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, out_dir, name)


def _depth_style(key: dict) -> dict:
    return {"linestyle": "--" if int(key["L"]) % 2 else "-"}


def _depth(title: str, name: str) -> Figure:
    def fig(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
        return _panels(
            runs, curves, ["L"], ["sweep", "step", "flops"], title, lambda k: f"L = {int(k['L'])}", None, out_dir, name
        )

    fig.__name__ = name
    fig.__doc__ = f"{title}: error against sweeps, iterations and flops, one line per depth."
    return fig


fig2_depth = _depth("Fig. 2: depth, cond(X) about 2.6 (descending BCGD, eq. 3.4)", "fig2_depth")
fig3_depth_illcond = _depth("Fig. 3: depth, cond(X) about 236 (descending BCGD, eq. 3.4)", "fig3_depth_illcond")
demo_depth = _depth("demo: depth sweep (descending BCGD, eq. 3.4)", "demo_depth")


def _algo_label(k: dict) -> str:
    if k.get("algo") == "gd":
        if k.get("lr_rule") == "du_hu":
            return "GD, Du-Hu step"
        return f"GD, lr = {k['lr']:.3g}"
    return "BCGD, optimal lr" if k.get("algo") == "bcgd" else str(k.get("algo"))


PANEL_ORDER = {"gauss_small": 0, "gauss_bigcond": 1, "gauss_teacher": 2, "uci_ethanol": 3, "mnist": 4, "l2": 0, "l4": 1}


def _split(runs: pd.DataFrame, col: str) -> list[tuple[Any, pd.DataFrame]]:
    """One panel per value of col, in the paper's left-to-right order."""
    if col not in runs or runs.empty:
        return [(None, runs)]
    values = sorted(runs[col].dropna().unique(), key=lambda v: (PANEL_ORDER.get(v, 99), str(v)))
    return [(v, runs[runs[col] == v]) for v in values]


def _vs_gd(
    runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, name: str, title: str, panel_col: str
) -> list[Path]:
    parts = _split(runs, panel_col)
    fig, axes = plt.subplots(2, len(parts), figsize=(4.8 * len(parts), 7.2), squeeze=False)
    by = ["algo", "lr_rule", "lr"]
    for col, (val, sub) in enumerate(parts):
        for row, x in enumerate(["step", "flops"]):
            ax = axes[row][col]
            _plot(ax, series(sub, curves, by, x), _algo_label)
            ax.set_xlabel(XLABEL[x])
            depth = sorted(sub["L"].unique()) if "L" in sub else []
            ax.set_title(f"{panel_col} = {val}, L = {', '.join(str(int(d)) for d in depth)}", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, out_dir, name)


def fig1_bcgd_vs_gd(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 1: BCGD (eq. 3.4) against GD at hand-picked steps, L = 100, per iteration and per flop."""
    return _vs_gd(runs, curves, out_dir, "fig1_bcgd_vs_gd", "Fig. 1: BCGD vs GD", "data")


def fig4_bcgd_vs_gd(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 4: BCGD vs GD; left the well-conditioned task (L = 400), right the ill-conditioned one (L = 5)."""
    return _vs_gd(runs, curves, out_dir, "fig4_bcgd_vs_gd", "Fig. 4: BCGD vs GD", "data")


def fig9_real_gd(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 9: BCGD vs GD on UCI (L = 4) and MNIST (L = 2)."""
    return _vs_gd(runs, curves, out_dir, "fig9_real_gd", "Fig. 9: BCGD vs GD on real data", "data")


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _rows_of(r: pd.DataFrame, key: dict) -> pd.DataFrame:
    """Rows of prepared runs whose columns equal the group key (None and NaN both mean missing)."""
    mask = np.ones(len(r), dtype=bool)
    for c, v in key.items():
        mask &= np.array(
            [(_missing(u) and _missing(v)) or (not _missing(u) and not _missing(v) and u == v) for u in r[c]],
            dtype=bool,
        )
    return r[mask]


def _arch_label(k: dict) -> str:
    ws = k.get("widths")
    if isinstance(ws, tuple) and ws:
        vals, counts = np.unique(np.asarray(ws), return_counts=True)
        common = int(vals[np.argmax(counts)])
        odd = [f"n_{i + 1} = {w}" for i, w in enumerate(ws) if w != common]
        return f"widths {common}" + (f" except {', '.join(odd[:3])}" if odd else "")
    w = k.get("width")
    return "default width" if w is None or _missing(w) else f"all widths {int(w)}"


def fig5_width(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 5: one narrow layer stalls training; markers at the W_1 updates (and W_50 where logged)."""
    by = ["width", "widths"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), squeeze=False)
    for ax, x in zip(axes[0], ["step", "flops"], strict=True):
        items = series(runs, curves, by, x)
        _plot(ax, items, _arch_label)
        ax.set_xlabel(XLABEL[x])
        if x != "step":
            continue
        r = _prep_runs(runs, by)
        for key, s in items:
            sel = _rows_of(r, key)
            if sel.empty:
                continue
            first = curves[curves["run_id"] == sel["run_id"].iloc[0]]
            depth = int(sel["L"].iloc[0])
            for layer, marker in ((1, "o"), (depth // 2, "*")):
                steps = first.loc[first["layer"] == layer, "step"].to_numpy()
                pts = s[np.isin(s["x"].to_numpy(), steps)]
                ax.plot(pts["x"], pts["med"], marker, markersize=3, fillstyle="none", color="k", alpha=0.5)
    shapes = zip(runs["d_in"], runs["d_out"], runs["L"], strict=True)
    dims = ", ".join(sorted({f"{int(a)} -> {int(b)}, L = {int(c)}" for a, b, c in shapes}))
    fig.suptitle(f"Fig. 5: width ({dims}, descending BCGD); o: W_1 updates, *: W_(L/2) updates", fontsize=10)
    return save_figure(fig, out_dir, "fig5_width")


def fig6_order_init(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 6: ascending vs descending for three inits; left d_in < d_out, right d_in > d_out."""
    panels = sorted({(int(a), int(b)) for a, b in zip(runs.get("d_in", []), runs.get("d_out", []), strict=True)})
    fig, axes = plt.subplots(2, max(len(panels), 1), figsize=(5 * max(len(panels), 1), 7.5), squeeze=False)
    colors = {"orth_identity": "C0", "balanced": "C1", "random": "C2", "orthogonal": "C3", "identity": "C4"}

    def style(k: dict) -> dict:
        return {"color": colors.get(k["init"], "k"), "linestyle": "-" if k["order"] == "asc" else "--"}

    for col, (d_in, d_out) in enumerate(panels):
        sub = runs[(runs["d_in"] == d_in) & (runs["d_out"] == d_out)]
        for row, x in enumerate(["step", "flops"]):
            ax = axes[row][col]
            _plot(ax, series(sub, curves, ["init", "order"], x), lambda k: f"{k['init']}, {k['order']}", style)
            ax.set_xlabel(XLABEL[x])
            ax.set_title(f"d_in = {d_in}, d_out = {d_out}", fontsize=8)
    depth = ", ".join(str(int(v)) for v in sorted(runs["L"].unique())) if "L" in runs else "?"
    fig.suptitle(f"Fig. 6: update order x initialisation (L = {depth}; solid asc, dashed desc)", fontsize=10)
    return save_figure(fig, out_dir, "fig6_order_init")


def fig7_uci(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 7: UCI Ethanol, depths 1..5; left L2 loss (eq. 3.4), right L4 loss (eq. 3.11)."""
    parts = _split(runs, "loss")
    fig, axes = plt.subplots(2, len(parts), figsize=(4.8 * len(parts), 7.2), squeeze=False)
    for col, (val, sub) in enumerate(parts):
        for row, x in enumerate(["step", "flops"]):
            ax = axes[row][col]
            _plot(ax, series(sub, curves, ["L"], x), lambda k: f"L = {int(k['L'])}", _depth_style)
            ax.set_xlabel(XLABEL[x])
            ax.set_title(f"loss = {val}", fontsize=8)
    fig.suptitle("Fig. 7: UCI Ethanol (identity init, descending BCGD)", fontsize=10)
    return save_figure(fig, out_dir, "fig7_uci")


def fig8_mnist(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 8: MNIST, depths 1..10 (even depths solid, odd dashed)."""
    return _panels(
        runs,
        curves,
        ["L"],
        ["step", "flops"],
        "Fig. 8: MNIST (identity init, descending BCGD)",
        lambda k: f"L = {int(k['L'])}",
        _depth_style,
        out_dir,
        "fig8_mnist",
    )


FIGURES: dict[str, Figure] = {
    "fig1_bcgd_vs_gd": fig1_bcgd_vs_gd,
    "fig2_depth": fig2_depth,
    "fig3_depth_illcond": fig3_depth_illcond,
    "fig4_bcgd_vs_gd": fig4_bcgd_vs_gd,
    "fig5_width": fig5_width,
    "fig6_order_init": fig6_order_init,
    "fig7_uci": fig7_uci,
    "fig8_mnist": fig8_mnist,
    "fig9_real_gd": fig9_real_gd,
    "demo_depth": demo_depth,
}
# The small test grids are named small_<figure> and draw the same figure.
FIGURES.update({f"small_{k}": v for k, v in list(FIGURES.items()) if k != "demo_depth"})


def median_table(runs: pd.DataFrame, by: list[str], cols: list[str]) -> pd.DataFrame:
    """Median (over seeds) of summary columns per group, with the number of runs (finished runs only;
    list-valued params such as widths made hashable so that they can be grouped on)."""
    return _median_table(_prep_runs(runs, by), by, cols)


def frames_from_results(items: Iterable[tuple[str, Any, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Build (runs, curves) in the store's format from (run_id, params, Result) triples, for tests
    and ad-hoc scripts that call the task directly. Pass validated params (a pydantic model) so that
    every param, defaults included, becomes a column as in the store."""
    rows, parts = [], []
    for run_id, params, res in items:
        if hasattr(params, "model_dump"):
            params = params.model_dump(mode="json")
        rows.append(
            {
                "run_id": run_id,
                "status": res.status,
                **params,
                **res.summary,
                "flops": res.flops,
                "n_steps": res.n_steps,
                "wall_s": float("nan"),
            }
        )
        if res.curve:
            parts.append(pd.DataFrame({"run_id": run_id, **{k: list(v) for k, v in res.curve.items()}}))
    curves = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["run_id", "step"])
    return pd.DataFrame(rows), curves
