"""Figures of paper 002 (Shin, layer-wise BCGD for deep linear networks) from result frames.

Every function takes `runs` (one row per run: run_id, status, one column per param and per summary
field, flops, n_steps, wall_s) and `curves` (run_id, step and the task's curve columns: err, loss_t,
lr_t, layer, sweep, flops_t, the `_t` ones named so beside the runs columns loss, lr and flops),
writes PNGs into `out_dir` and returns their paths. Seeds are aggregated by the median with an
interquartile band (analysis.aggregate); errors are clipped at the paper's 1e-10 floor and drawn on
log axes, against sweeps and iterations as the paper does, plus a per-flop panel (spec G11).
Only pandas, numpy, matplotlib and the store's column rule are used: the module does not run a learner.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.aggregate import group_keys
from analysis.aggregate import median_table as _median_table
from analysis.curve_plot import Line, add_legend, draw_lines, end_at_floor, figure_legend, mark_floor, seed_lines
from analysis.figures import Figure, save_figure
from analysis.load import finished
from analysis.style import new_figure
from runner.store.columns import RUN_COLUMNS, curve_column

FLOOR = 1e-10  # "if the error is less than 1e-10, we simply set 1e-10" (Sec. 4)
XLABEL = {
    "sweep": "sweeps (one sweep updates all L layers)",
    "step": "iterations t (one layer updated each)",
    "flops_t": "flops (learner, covariance form)",
}
# err is (1/m)[||W X - Y||^p - ||W* X - Y||^p], un-halved (the paper's y-axis); for p = 2 it is ||(W - W*) X||^2 / m
ERR_LABEL = {
    "l2": r"error to the optimum $\|(W - W^*)X\|_F^2\,/\,m$",
    "l4": r"excess loss $(\|WX - Y\|_4^4 - \|W^*X - Y\|_4^4)\,/\,m$",
}


def _err_label(runs: pd.DataFrame) -> str:
    losses = set(runs["loss"].dropna()) if "loss" in runs else {"l2"}
    return ERR_LABEL[losses.pop()] if len(losses) == 1 and next(iter(losses)) in ERR_LABEL else "error to the optimum"


def _prep_runs(runs: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Finished runs with every `by` column present (missing: None) and groupable (lists as tuples)."""
    out = finished(runs).copy()
    for col in by:
        if col not in out:
            out[col] = None
    return group_keys(out, by)


def _draw(
    ax: Any,
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    by: list[str],
    x: str,
    label: Callable[[dict], str],
    style: Callable[[dict], dict] | None = None,
    legend: bool = True,
) -> list[Line]:
    """The error against `x` (sweeps, iterations or flops), one line per group of `by`, clipped at the
    paper's floor; diverged runs are stubs (analysis.curve_plot)."""
    lines = seed_lines(_prep_runs(runs, by), curves, by, "err", x=x, label=label, style=style, floor=FLOOR)
    lines = end_at_floor(lines, FLOOR)  # past the floor a curve is not measured: it ends, marked, there
    draw_lines(ax, lines, XLABEL[x], _err_label(runs), legend=False, include=[FLOOR])
    mark_floor(ax, lines, FLOOR, f"reached the floor {FLOOR:g} (the paper's: below it, set to it)")
    if x == "flops_t":
        _scaled_axis(ax, lines)
    if legend:
        add_legend(ax, lines)
    return lines


def _scaled_axis(ax: Any, lines: list[Line]) -> None:
    """Flops as multiples of a power of ten named in the axis label, not an offset text in the corner."""
    from matplotlib.ticker import FuncFormatter

    top = max((float(np.nanmax(ln.x)) for ln in lines if ln.x.size), default=0.0)
    power = int(np.floor(np.log10(top))) if top > 0 else 0
    if power >= 3:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v / 10**power:g}"))
        ax.set_xlabel(f"{ax.get_xlabel()}, $\\times 10^{{{power}}}$")


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
    fig, axes = new_figure(1, len(xs), figsize=(4.6 * len(xs), 4.2), squeeze=False)
    for i, (ax, x) in enumerate(zip(axes[0], xs, strict=True)):
        lines = _draw(ax, runs, curves, by, x, label, style, legend=False)
        if i:
            ax.set_ylabel("")  # one y-axis label for the row: the panels share what they draw
    figure_legend(fig, axes[0][0], lines)  # the same lines in every panel
    fig.suptitle(title)
    return save_figure(fig, out_dir, name)


def _depth_style(key: dict) -> dict:
    return {"linestyle": "--" if int(key["L"]) % 2 else "-"}


def _depth(title: str, name: str) -> Figure:
    def fig(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
        return _panels(
            runs,
            curves,
            ["L"],
            ["sweep", "step", "flops_t"],
            title,
            lambda k: f"L = {int(k['L'])}",
            None,
            out_dir,
            name,
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
    fig, axes = new_figure(2, len(parts), figsize=(4.8 * len(parts), 7.2), squeeze=False)
    by = ["algo", "lr_rule", "lr"]
    for col, (val, sub) in enumerate(parts):
        for row, x in enumerate(["step", "flops_t"]):
            ax = axes[row][col]
            _draw(ax, sub, curves, by, x, _algo_label)
            depth = sorted(sub["L"].unique()) if "L" in sub else []
            ax.set_title(f"{panel_col} = {val}, L = {', '.join(str(int(d)) for d in depth)}")
    fig.suptitle(title)
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
    fig, axes = new_figure(1, 2, figsize=(10, 4), squeeze=False)
    for ax, x in zip(axes[0], ["step", "flops_t"], strict=True):
        lines = _draw(ax, runs, curves, by, x, _arch_label)
        if x != "step":
            continue
        r = _prep_runs(runs, by)
        for ln in lines:
            sel = _rows_of(r, ln.key)
            if sel.empty or ln.diverged:
                continue
            first = curves[curves["run_id"] == sel["run_id"].iloc[0]]
            depth = int(sel["L"].iloc[0])
            for layer, marker in ((1, "o"), (depth // 2, "*")):
                at = np.isin(ln.x, first.loc[first["layer"] == layer, "step"].to_numpy())
                ax.plot(ln.x[at], ln.y[at], marker, markersize=3, fillstyle="none", color="k", alpha=0.5)
    shapes = zip(runs["d_in"], runs["d_out"], runs["L"], strict=True)
    dims = ", ".join(sorted({f"{int(a)} -> {int(b)}, L = {int(c)}" for a, b, c in shapes}))
    fig.suptitle(f"Fig. 5: width ({dims}, descending BCGD); o: W_1 updates, *: W_(L/2) updates")
    return save_figure(fig, out_dir, "fig5_width")


def _order_label(key: dict) -> str:
    return f"{key['init']}, {key['order']}"


def fig6_order_init(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 6: ascending vs descending for three inits; left d_in < d_out, right d_in > d_out."""
    panels = sorted({(int(a), int(b)) for a, b in zip(runs.get("d_in", []), runs.get("d_out", []), strict=True)})
    fig, axes = new_figure(2, max(len(panels), 1), figsize=(5 * max(len(panels), 1), 7.5), squeeze=False)
    colors = {"orth_identity": "C0", "balanced": "C1", "random": "C2", "orthogonal": "C3", "identity": "C4"}

    def style(k: dict) -> dict:
        return {"color": colors.get(k["init"], "k"), "linestyle": "-" if k["order"] == "asc" else "--"}

    for col, (d_in, d_out) in enumerate(panels):
        sub = runs[(runs["d_in"] == d_in) & (runs["d_out"] == d_out)]
        for row, x in enumerate(["step", "flops_t"]):
            ax = axes[row][col]
            lines = _draw(ax, sub, curves, ["init", "order"], x, _order_label, style, legend=False)
            ax.set_title(f"d_in = {d_in}, d_out = {d_out}")
    if panels:
        figure_legend(fig, axes[0][0], lines)  # the same init x order pairs in every panel
    depth = ", ".join(str(int(v)) for v in sorted(runs["L"].unique())) if "L" in runs else "?"
    fig.suptitle(f"Fig. 6: update order x initialisation (L = {depth}; solid asc, dashed desc)")
    return save_figure(fig, out_dir, "fig6_order_init")


def fig7_uci(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 7: UCI Ethanol, depths 1..5; left L2 loss (eq. 3.4), right L4 loss (eq. 3.11)."""
    parts = _split(runs, "loss")
    fig, axes = new_figure(2, len(parts), figsize=(4.8 * len(parts), 7.2), squeeze=False)
    for col, (val, sub) in enumerate(parts):
        for row, x in enumerate(["step", "flops_t"]):
            ax = axes[row][col]
            _draw(ax, sub, curves, ["L"], x, lambda k: f"L = {int(k['L'])}", _depth_style)
            ax.set_title(f"loss = {val}")
    fig.suptitle("Fig. 7: UCI Ethanol (identity init, descending BCGD)")
    return save_figure(fig, out_dir, "fig7_uci")


def fig8_mnist(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Fig. 8: MNIST, depths 1..10 (even depths solid, odd dashed)."""
    return _panels(
        runs,
        curves,
        ["L"],
        ["step", "flops_t"],
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
        if res.curve:  # under the store's names: `<name>_t` where the run has a column of the name
            taken = set(rows[-1]) | {f.name for f in RUN_COLUMNS}
            parts.append(
                pd.DataFrame({"run_id": run_id, **{curve_column(k, taken): list(v) for k, v in res.curve.items()}})
            )
    curves = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["run_id", "step"])
    return pd.DataFrame(rows), curves
