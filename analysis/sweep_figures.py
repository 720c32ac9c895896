"""The figures of any grid no learner's figure module draws: what W&B, TensorBoard's HParams view or
Optuna draw for any sweep, in the house style (analysis.style) and by the curve rules of
analysis.curve_plot (median and IQR over seeds, diverged runs as marked stubs).

What a grid swept is read from its runs alone, never from task code (so a learner outside the
repository is drawn as one of ours): the params are the keys of each run's `params_json`, the swept
ones those with more than one value among the finished runs (seeds apart: they are what the median
and IQR are taken over); the curve fields are the columns of its curves, the summary fields the runs'
columns that are neither the store's own nor params.

- `curve_<field>.png`: each curve field against its step, one line per combination of the swept
  params; past MAX_LINES lines, small multiples (one panel per value of one swept param).
- `summary_<field>.png`: each numeric summary field against each swept param (one panel per param;
  points: median over seeds, bars: IQR; one line per combination of the other swept params, or the
  median of all runs where those are too many); a diverged run is an x on the panel's top edge.
- `parallel.png`, where three or more params are swept: every finished run as a line across one axis
  per swept param and the metric (HParams' parallel coordinates), coloured by the metric.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analysis.aggregate import group_keys, quartiles
from analysis.curve_plot import add_legend, draw_lines, seed_lines
from analysis.figures import save_figure
from analysis.load import finished
from analysis.style import COLORS, ERRORBAR_NOTE, PANEL, line, new_figure, styled
from runner.store.columns import SHARED_RUN_COLUMNS

if TYPE_CHECKING:
    from matplotlib.axes import Axes

MAX_LINES = len(COLORS)  # lines one panel holds before colours repeat: past it, small multiples
MAX_PANELS = 12  # panels of one figure; the values of a facet past it are named in the note, not drawn
MAX_CATEGORIES = 12  # values of a categorical axis labelled one by one
CURVE_KEYS = ("run_id", "step", "batch_id")
AXIS_LABELS = 5  # values labelled on a numeric parallel axis with more than this many
SUMMARY_ROWS = 4  # summary fields (rows of panels) to one figure
LOG_SPAN = 100.0  # positive values spanning this factor or more are drawn on a log axis


def is_seed(name: str) -> bool:
    """Params the median is taken over, never swept: `seed` and the learners' `*_seed` streams."""
    return name == "seed" or name.endswith("_seed")


@dataclass
class Sweep:
    """What a grid's finished runs vary and measure."""

    runs: pd.DataFrame  # finished runs, params and summary fields as columns, list values as tuples
    swept: list[str]  # params with more than one value, in the order the runs' params_json lists them
    fixed: dict[str, Any]  # params with one value
    summary: list[str]  # numeric summary fields
    curve_fields: list[str] = field(default_factory=list)
    seeds: int = 1  # largest number of runs sharing one combination of the swept params

    def values(self, param: str) -> list[Any]:
        return _sorted_values(self.runs[param])


def _sorted_values(values: pd.Series) -> list[Any]:
    distinct = list(dict.fromkeys(v for v in values.dropna().tolist()))
    try:
        return sorted(distinct, key=lambda v: (v is None, v))
    except TypeError:  # mixed types (None beside numbers sorts first above; str beside int here)
        return sorted(distinct, key=str)


def _param_names(runs: pd.DataFrame) -> list[str]:
    seen: dict[str, None] = {}
    for text in runs["params_json"].dropna():
        seen.update(dict.fromkeys(json.loads(text)))
    return [n for n in seen if n in runs.columns]


def _numeric(series: pd.Series) -> bool:
    return bool(pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series))


def declared_axes(grid_file: Mapping[str, Any], task: str) -> list[str]:
    """The params a grid file sweeps for `task`: its blocks' `product` and `zip` keys, and the `params`
    keys whose values differ between its blocks of that task (a block per algorithm, say)."""
    blocks = [b for b in grid_file.get("blocks") or [] if isinstance(b, Mapping) and b.get("task") == task]
    if not blocks and grid_file.get("task") == task:  # a study: its space
        return [str(k) for k in grid_file.get("space") or {}]
    axes: dict[str, None] = {}
    for block in blocks:
        for kind in ("product", "zip"):
            axes.update(dict.fromkeys(str(k) for k in block.get(kind) or {}))
    fixed = [b.get("params") or {} for b in blocks]
    for key in dict.fromkeys(k for f in fixed for k in f):
        if len({repr(f.get(key)) for f in fixed}) > 1:
            axes[str(key)] = None
    return list(axes)


def _derived(done: pd.DataFrame, varied: list[str]) -> set[str]:
    """Params that follow another one by one (a resolved default such as linear_resnet's a_var = 1/m):
    not axes of their own. Of such a pair the float one is dropped (the other is what a grid writes)."""
    order = sorted(varied, key=lambda p: (pd.api.types.is_float_dtype(done[p]), varied.index(p)))
    kept: list[str] = []
    dropped: set[str] = set()
    for p in order:
        pairs = done[[p, *kept]].astype(str)
        if any(pairs.groupby(q)[p].nunique().max() == 1 and pairs.groupby(p)[q].nunique().max() == 1 for q in kept):
            dropped.add(p)
        else:
            kept.append(p)
    return dropped


def sweep_of(runs: pd.DataFrame, curves: pd.DataFrame | None = None, axes: Sequence[str] | None = None) -> Sweep:
    """The Sweep of a grid's runs (as analysis.load gives them) and curves; `axes`: the params the grid
    file sweeps (`declared_axes`), else those that vary, less those that follow another one."""
    done = finished(runs).reset_index(drop=True)
    params = _param_names(done) if "params_json" in done else []
    done = group_keys(done, params)
    swept, fixed = [], {}
    for name in params:
        values = done[name].dropna().unique().tolist() if not done.empty else []
        if is_seed(name):
            continue
        if len(set(map(repr, values))) > 1:
            swept.append(name)
        elif values:
            fixed[name] = values[0]
    if axes is not None:
        swept = [p for p in axes if p in swept]
    else:
        swept = [p for p in swept if p not in _derived(done, swept)]
    own = set(SHARED_RUN_COLUMNS) | set(params)
    summary = [c for c in done.columns if c not in own and _numeric(done[c])]
    fields = [c for c in (curves.columns if curves is not None else []) if c not in CURVE_KEYS]
    # a field these runs never logged (another algorithm's) is left out
    fields = [c for c in fields if curves is not None and _numeric(curves[c]) and curves[c].notna().any()]
    seeds = int(done.groupby(swept, dropna=False).size().max()) if swept and not done.empty else len(done)
    return Sweep(done, swept, fixed, summary, fields, max(seeds, 1))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    return str(value)


def _label(key: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {_fmt(v)}" for k, v in key.items()) or "all runs"


def _log_scale(values: Any) -> bool:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return bool(v.size and (v > 0).all() and v.max() / v.min() >= LOG_SPAN)


def _facet(sweep: Sweep) -> str | None:
    """The swept param whose values become panels when one panel cannot hold a line per combination:
    the one leaving the fewest lines per panel (fewest panels on a tie); None when one panel will do."""
    combos = len(sweep.runs.drop_duplicates(sweep.swept)) if sweep.swept else 1
    if combos <= MAX_LINES or len(sweep.swept) < 2:
        return None
    sizes = {p: len(sweep.values(p)) for p in sweep.swept}
    return min(sweep.swept, key=lambda p: (math.ceil(combos / sizes[p]) > MAX_LINES, -sizes[p], p))


def _grid_shape(n: int) -> tuple[int, int]:
    cols = min(n, 3)
    return math.ceil(n / cols), cols


def curve_figures(sweep: Sweep, curves: pd.DataFrame, out_dir: Path, title: str) -> tuple[list[Path], list[str]]:
    """One figure per curve field (see the module's doc); also the notes on what was left out."""
    images: list[Path] = []
    notes: list[str] = []
    facet = _facet(sweep)
    panels: list[Any] = sweep.values(facet) if facet else [None]
    if len(panels) > MAX_PANELS:
        notes.append(f"curves: {facet} = {', '.join(_fmt(v) for v in panels[MAX_PANELS:])} not drawn")
        panels = panels[:MAX_PANELS]
    by = [p for p in sweep.swept if p != facet]
    for name in sweep.curve_fields:
        rows, cols = _grid_shape(len(panels))
        fig, axes = new_figure(rows, cols, squeeze=False, sharey=True)
        log = _log_scale(curves[name])
        for i, value in enumerate(panels):
            ax = axes.flat[i]
            runs = sweep.runs if facet is None else sweep.runs[sweep.runs[facet].map(lambda v, w=value: v == w)]
            lines = (
                seed_lines(runs, curves, by, name, label=_label)
                if by
                else seed_lines(runs.assign(__all=0), curves, ["__all"], name, label=lambda _: "all runs")
            )
            draw_lines(ax, lines, "step", name if i % cols == 0 else "", log_y=log, legend=False)
            if facet is not None:
                ax.set_title(f"{facet} = {_fmt(value)}")
            if lines and (i == 0 or facet is not None and len(by) == 0):
                add_legend(ax, lines, loc="best")
        for ax in axes.flat[len(panels) :]:
            ax.set_visible(False)
        fig.suptitle(f"{title}: {name} against step")
        images += save_figure(fig, out_dir, f"curve_{_file(name)}")
    return images, notes


def _file(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _at(series: pd.Series, pos: dict[Any, float]) -> pd.Series:
    """Each value's position on its axis (NaN for a value not on it: a null param)."""
    return series.map(lambda v: pos.get(v, np.nan)).astype(float)


def _positions(values: list[Any], numeric: bool) -> dict[Any, float]:
    if numeric:
        return {v: float(v) for v in values}
    return {v: float(i) for i, v in enumerate(values)}


def _set_axis(ax: Axes, param: str, values: list[Any], numeric: bool) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel(param)
    if not numeric:
        ax.set_xticks(range(len(values)), [_fmt(v) for v in values])
        ax.set_xlim(-0.5, len(values) - 0.5)
        return
    if _log_scale(values):
        ax.set_xscale("log")
    if all(float(v).is_integer() for v in values):  # an integer param (a depth) gets integer ticks only
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _diverged(runs: pd.DataFrame) -> pd.Series:
    return runs["status"].eq("diverged") if "status" in runs else pd.Series(False, index=runs.index)


def _varies(values: pd.Series) -> bool:
    """More than one finite value, apart by more than 1e-9 of their size: a field that moves with the params."""
    v = values.astype(float).to_numpy()
    v = v[np.isfinite(v)]
    return bool(v.size and v.max() - v.min() > 1e-9 * max(abs(v.max()), abs(v.min())))


def summary_figures(sweep: Sweep, out_dir: Path, title: str) -> tuple[list[Path], list[str]]:
    """The numeric summary fields that vary among the finished runs against each swept param: a row of
    panels per field (one per swept param), SUMMARY_ROWS fields to a figure; also the names of the
    fields left out because every run has the same value."""
    if not sweep.swept:
        return [], []
    diverged = _diverged(sweep.runs)
    shown: list[str] = []
    constant: list[str] = []
    for name in sweep.summary:
        ok = ~diverged & sweep.runs[name].notna()
        if ok.any():  # a field these runs do not measure (another algorithm's) has nothing to draw
            medians = sweep.runs[ok].groupby(sweep.swept, dropna=False)[name].median()
            (shown if _varies(medians) else constant).append(name)
    images: list[Path] = []
    cols = len(sweep.swept)
    for page, start in enumerate(range(0, len(shown), SUMMARY_ROWS), start=1):
        names = shown[start : start + SUMMARY_ROWS]
        size = (max(PANEL[0], 0.8 * PANEL[0] * cols), 0.8 * PANEL[1] * len(names) + 0.4)
        fig, axes = new_figure(len(names), cols, figsize=size, squeeze=False, sharey="row")
        for r, name in enumerate(names):
            ok = ~diverged & sweep.runs[name].notna()
            for c, param in enumerate(sweep.swept):
                _summary_panel(axes[r, c], sweep, param, name, ok, diverged, legend=r == 0)
            axes[r, 0].set_ylabel(name)
            if _log_scale(sweep.runs.loc[ok, name]):
                axes[r, 0].set_yscale("log")
        pages = -(-len(shown) // SUMMARY_ROWS)
        of = f" ({page} of {pages})" if pages > 1 else ""
        fig.suptitle(f"{title}: summary fields against each swept param{of}")
        images += save_figure(fig, out_dir, f"summary_{page}")
    return images, constant


def _summary_panel(
    ax: Axes, sweep: Sweep, param: str, name: str, ok: pd.Series, diverged: pd.Series, legend: bool
) -> None:
    values = sweep.values(param)
    numeric = all(isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool) for v in values)
    pos = _positions(values, numeric)
    others = [p for p in sweep.swept if p != param]
    runs = sweep.runs
    combos = runs[others].drop_duplicates() if others else pd.DataFrame(index=[0])
    groups: list[tuple[str, pd.Series]]
    if others and len(combos) <= MAX_LINES:
        groups = []
        for _, combo in combos.iterrows():
            mask = pd.Series(True, index=runs.index)
            for p in others:
                mask &= runs[p].map(lambda v, w=combo[p]: v == w)
            groups.append((_label({p: combo[p] for p in others}), mask))
    else:
        groups = [("median of all runs" if others else "median", pd.Series(True, index=runs.index))]
        if others:  # every run as a faint point: the spread the median is taken over
            xs = _at(runs.loc[ok, param], pos)
            ax.plot(xs, runs.loc[ok, name].astype(float), ".", color="0.6", alpha=0.5, label="one run")
    for i, (label, mask) in enumerate(groups):
        xs, med, lo, hi = [], [], [], []
        for v in values:
            sel = mask & ok & runs[param].map(lambda u, w=v: u == w)
            if sel.any():
                q25, q50, q75 = quartiles(runs.loc[sel, name])
                xs.append(pos[v])
                med.append(q50)
                lo.append(q50 - q25)
                hi.append(q75 - q50)
        look: dict[str, Any] = line(i)
        if xs:
            ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=2, label=label, **look)
        bad = mask & diverged & runs[param].notna()
        if bad.any():  # where the run blew up there is no value: an x on the top edge says it did
            ax.plot(
                _at(runs.loc[bad, param], pos),
                np.ones(int(bad.sum())),
                "x",
                color=look["color"],
                transform=ax.get_xaxis_transform(),
                clip_on=False,
                markersize=7,
                mew=1.5,
                label=f"{label}: diverged" if len(groups) > 1 else "diverged",
            )
    _set_axis(ax, param, values, numeric)
    if legend:
        ax.legend(title=ERRORBAR_NOTE, loc="best")


def headline(summary: Sequence[str]) -> str | None:
    """The summary field a run is judged by, as far as names tell: a final loss or error, else any
    loss or error, else the first field."""
    for test in (
        lambda n: ("loss" in n or "err" in n) and "final" in n,
        lambda n: "final" in n,
        lambda n: n.startswith(("loss", "err")) and not n.endswith("_0"),
    ):
        found = [n for n in summary if test(n)]
        if found:
            return found[0]
    return summary[0] if summary else None


def parallel_figure(sweep: Sweep, out_dir: Path, title: str) -> list[Path]:
    """HParams' parallel coordinates: one vertical axis per swept param and one for the metric (the first
    summary field named like a loss, else the first), every finished run a line coloured by the metric."""
    if len(sweep.swept) < 3:
        return []
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.lines import Line2D

    metric = headline(sweep.summary)
    axes_names = [*sweep.swept, *([metric] if metric else [])]
    runs = sweep.runs
    diverged = _diverged(runs)
    coords = np.full((len(runs), len(axes_names)), np.nan)
    ticks: list[list[tuple[float, str]]] = []
    for j, name in enumerate(axes_names):
        col = runs[name]
        if name == metric or _numeric(col):
            v = col.astype(float).to_numpy()
            finite = v[np.isfinite(v) & ~diverged.to_numpy()]
            log = _log_scale(finite)
            t = np.log10(np.where(v > 0, v, np.nan)) if log else v
            ft = np.log10(finite) if log else finite
            lo, hi = (float(ft.min()), float(ft.max())) if ft.size else (0.0, 1.0)
            span = hi - lo or 1.0
            coords[:, j] = (t - lo) / span
            distinct = sorted(set(finite.tolist()))
            if name == metric or len(distinct) > AXIS_LABELS:  # evenly spaced marks, not every value
                steps = np.linspace(lo, hi, AXIS_LABELS if span else 1)
                distinct = [float(10**t if log else t) for t in steps]
            ticks.append([(((math.log10(m) if log else m) - lo) / span, f"{m:.3g}") for m in distinct])
        else:
            values = sweep.values(name)
            at = {v: (i / (len(values) - 1) if len(values) > 1 else 0.5) for i, v in enumerate(values)}
            coords[:, j] = _at(col, at).to_numpy()
            ticks.append([(at[v], _fmt(v)) for v in values[:MAX_CATEGORIES]])
    fig, ax = new_figure(figsize=(max(PANEL[0], 1.6 * len(axes_names)), PANEL[1] + 0.4))
    cmap = colormaps["viridis"]
    mvals = runs[metric].astype(float).to_numpy() if metric else np.zeros(len(runs))
    good = np.isfinite(mvals) & ~diverged.to_numpy()
    norm: Normalize = Normalize()
    if metric and good.any():
        norm = (
            LogNorm(mvals[good].min(), mvals[good].max())
            if _log_scale(mvals[good])
            else Normalize(mvals[good].min(), mvals[good].max())
        )
    xs = np.arange(len(axes_names))
    for i in np.argsort(np.where(good, mvals, -np.inf)):  # the best (lowest) drawn last, on top
        if diverged.iloc[i]:
            ax.plot(xs[:-1] if metric else xs, coords[i, : len(xs) - (1 if metric else 0)], "--", color="0.55", lw=0.9)
        elif good[i] or not metric:
            ax.plot(xs, coords[i], color=cmap(norm(mvals[i])) if metric else COLORS[0], lw=1.1, alpha=0.85)
    for j, marks in enumerate(ticks):
        ax.axvline(j, color="0.2", lw=0.8)
        for y, text in marks:
            ax.text(j + 0.04, y, text, fontsize=7, va="center", ha="left")
    ax.set_xticks(xs, axes_names)
    ax.set_yticks([])
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlim(-0.2, len(axes_names) - 0.5)
    ax.grid(False)
    handles = []
    if diverged.any():
        handles.append(Line2D([], [], ls="--", color="0.55", label=f"diverged ({int(diverged.sum())} runs)"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(0, -0.08))
    if metric and good.any():
        from matplotlib.cm import ScalarMappable

        fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label=metric)
    ax.set_title(f"{title}: finished runs" + (f" by {metric}" if metric else ""))
    return save_figure(fig, out_dir, "parallel")


@styled
def sweep_figures(
    runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path, title: str, axes: Sequence[str] | None = None
) -> tuple[list[Path], str]:
    """Every default figure of a grid's runs and curves (`axes`: as `sweep_of`), and a note for the
    report: what is swept, the seeds, and anything left undrawn."""
    sweep = sweep_of(runs, curves, axes)
    images, notes = curve_figures(sweep, curves, out_dir, title)
    summary, constant = summary_figures(sweep, out_dir, title)
    images += summary
    if constant:
        notes.append(f"summary fields with one median for every combination: {', '.join(constant)}")
    images += parallel_figure(sweep, out_dir, title)
    swept = "; ".join(f"{p} ({len(sweep.values(p))} values)" for p in sweep.swept) or "nothing"
    note = f"Swept: {swept}; up to {sweep.seeds} seeds per combination (lines and points: median, bands and bars: IQR)."
    if not sweep.curve_fields:
        notes.append("no curve columns stored")
    return images, note + (f" Not drawn: {'; '.join(notes)}." if notes else "")
