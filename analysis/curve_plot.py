"""Curves against steps (or sweeps, or flops), drawn by one set of rules for every learner:

- a line is the median over the seeds of one group of runs, its band their inter-quartile range, and
  the legend says so with the number of seeds;
- a diverged run is drawn as a stub that ends, marked with an x, where it blows up: at its last
  finite value, or where it leaves the top of the axes if that comes first; it never takes part in
  the y-range (one diverged run would otherwise stretch the axis to 1e151 and flatten every
  converging curve into a band);
- the x-axis ends where the last curve stops changing visibly (by 1% of the axis height) or the last
  stub ends: the flat steps after a curve reached its tolerance or floor are not drawn as padding,
  nor the steps a diverging run spends far above the axes before it overflows.

`seed_lines` turns the store's frames into `Line`s (any run param may group them; list params such as
`widths` too), `draw_lines` draws them on an axes and fits its ranges.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analysis.aggregate import band, group_keys
from analysis.load import finished
from analysis.style import BAND_ALPHA, line

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SETTLED = 0.01  # a change below this share of the axis height is invisible: the curve has stopped changing
X_MARGIN = 0.03  # room after the last change, so that a settled curve is seen to be flat


@dataclass
class Line:
    """One line to draw: the median `y` at each `x`, its band (`lo`, `hi`) over `seeds` runs; a
    diverged line is a stub (no band, not part of the y-range)."""

    label: str
    x: np.ndarray
    y: np.ndarray
    lo: np.ndarray | None = None
    hi: np.ndarray | None = None
    seeds: int = 1
    diverged: bool = False
    style: dict[str, Any] = field(default_factory=dict)
    key: dict[str, Any] = field(default_factory=dict)  # the group's param values


def _default_label(key: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {v:g}" if isinstance(v, float) else f"{k} = {v}" for k, v in key.items())


def seed_lines(
    runs: pd.DataFrame,
    curves: pd.DataFrame,
    by: Sequence[str],
    y: str,
    x: str = "step",
    label: Callable[[dict[str, Any]], str] = _default_label,
    style: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    floor: float | None = None,
) -> list[Line]:
    """Per group of the run params `by`: a line over its finished runs that did not diverge (median
    and IQR of curve column `y` at each step; `x` is the step or the median of curve column `x` at
    that step, e.g. sweeps or flops), and a stub over its diverged runs. Values below `floor` are
    drawn on it (a paper's "below 1e-10 we set 1e-10")."""
    by = list(by)
    done = group_keys(finished(runs), by)
    diverged = done["status"].eq("diverged") if "status" in done else pd.Series(False, index=done.index)
    keys = pd.DataFrame({"run_id": done["run_id"], "__div": diverged.to_numpy()})
    for col in by:
        keys[col] = done[col].to_numpy()
    values = curves[y].astype(float)
    picked = pd.DataFrame(
        {
            "run_id": curves["run_id"],
            "step": curves["step"],
            "__y": values if floor is None else values.clip(lower=floor),
            "__x": curves[x] if x != "step" else curves["step"],
        }
    )
    merged = picked.merge(keys, on="run_id")
    lines: list[Line] = []
    if merged.empty:
        return lines
    for i, (key, grp) in enumerate(merged.groupby(by, dropna=False, sort=True)):
        values_of = dict(zip(by, key, strict=True))
        name = label(values_of)
        look = {**line(i), **(style(values_of) if style else {})}
        ok, bad = grp[~grp["__div"]], grp[grp["__div"]]
        n_ok, n_bad = ok["run_id"].nunique(), bad["run_id"].nunique()
        if n_ok:
            lines.append(_median_line(ok, name, look, values_of, n_ok, x))
        if n_bad:
            share = f" ({n_bad} of {n_ok + n_bad} seeds)" if n_ok + n_bad > 1 else ""
            lines.append(_stub(bad, f"{name}: diverged{share}", look, values_of, n_bad, x))
    return [ln for ln in lines if ln.x.size]


def _median_line(grp: pd.DataFrame, name: str, look: dict, key: dict, seeds: int, x: str) -> Line:
    b = band(grp, ["step"], "__y")
    xs = b["step"].to_numpy(dtype=float) if x == "step" else band(grp, ["step"], "__x")["median"].to_numpy(dtype=float)
    keep = np.isfinite(b["median"].to_numpy(dtype=float)) & np.isfinite(xs)
    return Line(
        name,
        xs[keep],
        b["median"].to_numpy(dtype=float)[keep],
        b["q25"].to_numpy(dtype=float)[keep],
        b["q75"].to_numpy(dtype=float)[keep],
        seeds,
        style=look,
        key=key,
    )


def _stub(bad: pd.DataFrame, name: str, look: dict, key: dict, n_bad: int, x: str) -> Line:
    """The diverged runs' median up to the last step at which at least half of them are still finite."""
    finite = bad[np.isfinite(bad["__y"].astype(float))].groupby("step")["run_id"].nunique()
    last = finite[finite * 2 >= n_bad].index.max() if not finite.empty else -np.inf
    stub = _median_line(bad[bad["step"] <= last], name, look, key, n_bad, x)
    stub.lo = stub.hi = None
    stub.diverged = True
    return stub


def _visible(values: np.ndarray, log: bool) -> np.ndarray:
    v = values[np.isfinite(values)]
    return v[v > 0] if log else v


def _scale(values: np.ndarray, log: bool) -> np.ndarray:
    return np.log10(values) if log else values


def y_range(lines: Sequence[Line], log: bool, include: Sequence[float] = ()) -> tuple[float, float] | None:
    """The y-range of the lines that did not diverge (their medians and bands) and of the reference
    values `include`, padded by 5%; the stubs' own range only when every line diverged (there is
    nothing else to show)."""
    shown = [ln for ln in lines if not ln.diverged] or list(lines)
    parts = [_visible(a, log) for ln in shown for a in (ln.y, ln.lo, ln.hi) if a is not None]
    parts.append(_visible(np.asarray(include, dtype=float), log))
    values = np.concatenate(parts) if parts else np.empty(0)
    if values.size == 0:
        return None
    lo, hi = _scale(np.array([values.min(), values.max()]), log)
    pad = 0.05 * (hi - lo) if hi > lo else 0.5
    lo, hi = lo - pad, hi + pad
    return (10**lo, 10**hi) if log else (lo, hi)


def settled_at(ln: Line, limits: tuple[float, float], log: bool) -> float:
    """The x after which `ln` (median and band) changes by less than SETTLED of the axis height."""
    lo, hi = _scale(np.asarray(limits, dtype=float), log)
    tol = SETTLED * (hi - lo)
    last = 0
    for values in (ln.y, ln.lo, ln.hi):
        if values is None or values.size == 0:
            continue
        v = np.clip(values, *limits)
        v = _scale(np.where(np.isfinite(v), v, limits[1]), log)
        moved = np.flatnonzero(np.abs(v - v[-1]) > tol)
        if moved.size:
            last = max(last, min(int(moved[-1]) + 1, v.size - 1))
    return float(ln.x[last])


def stub_end(ln: Line, limits: tuple[float, float] | None) -> int:
    """The index at which a stub ends: its first point above the axes, or its last point."""
    above = np.flatnonzero(ln.y > limits[1]) if limits is not None else np.empty(0, dtype=int)
    return int(above[0]) if above.size else ln.x.size - 1


def x_end(lines: Sequence[Line], limits: tuple[float, float] | None, log_y: bool) -> float:
    """Where the x-axis ends: the last settle point of a converging line, or a stub's end."""
    ends = [
        float(ln.x[stub_end(ln, limits)])
        if ln.diverged
        else float(ln.x[-1])
        if limits is None
        else settled_at(ln, limits, log_y)
        for ln in lines
    ]
    return max(ends)


def x_limits(
    lines: Sequence[Line], limits: tuple[float, float] | None, log_y: bool, log_x: bool
) -> tuple[float, float]:
    """The x-range: from the first point (the origin when that is close) to `x_end` plus X_MARGIN."""
    x0 = min(float(ln.x[0]) for ln in lines)
    x1 = x_end(lines, limits, log_y)
    if not log_x and 0 < x0 <= 0.05 * (x1 - x0):
        x0 = 0.0  # curves logged from step 1 (or a first sweep's fraction) start at the origin
    if log_x and x0 > 0:
        return x0, x0 * (x1 / x0) ** (1 + X_MARGIN) if x1 > x0 else x0 * 10
    return x0, x1 + X_MARGIN * (x1 - x0) if x1 > x0 else x0 + 1


def draw_lines(
    ax: Axes,
    lines: Sequence[Line],
    xlabel: str,
    ylabel: str,
    log_y: bool = True,
    log_x: bool = False,
    legend: bool = True,
    include: Sequence[float] = (),
) -> None:
    """Draw `lines` on `ax` (medians, IQR bands, diverged stubs) and fit its ranges by the rules above;
    `include`: reference values (a bound, an optimum) the y-range must show."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if log_y:
        ax.set_yscale("log")
    if log_x:
        ax.set_xscale("log")
    if not lines:
        ax.text(0.5, 0.5, "no finished runs", ha="center", va="center", transform=ax.transAxes)
        return
    limits = y_range(lines, log_y, include)
    x0, x1 = x_limits(lines, limits, log_y, log_x)
    for ln in lines:
        if ln.diverged:
            _draw_stub(ax, ln, limits)
            continue
        # drawn whole: past the axis end it is flat (settled_at), and a reader who widens the axes sees it so
        (drawn,) = ax.plot(ln.x, ln.y, label=ln.label, **ln.style)
        if ln.seeds > 1 and ln.lo is not None and ln.hi is not None:
            faint = float(ln.style.get("alpha", 1.0))  # a faint line gets a fainter band
            ax.fill_between(ln.x, ln.lo, ln.hi, color=drawn.get_color(), alpha=BAND_ALPHA * faint, linewidth=0)
    if limits is not None:
        ax.set_ylim(*limits)
    ax.set_xlim(x0, x1)
    if legend:
        add_legend(ax, lines)


def _draw_stub(ax: Axes, ln: Line, limits: tuple[float, float] | None) -> None:
    end = stub_end(ln, limits)
    look = {**ln.style, "linewidth": 1.0}
    x, y = ln.x[: end + 1], ln.y[: end + 1]
    if limits is not None and y[-1] > limits[1]:  # it leaves the axes: its mark sits on the top edge
        y = np.append(y[:-1], limits[1])
    ax.plot(x, y, label=ln.label, marker="x", markevery=[x.size - 1], markersize=7, mew=1.5, clip_on=False, **look)


def end_at_floor(lines: Sequence[Line], floor: float) -> list[Line]:
    """`lines` (drawn with values below `floor` set to it, as seed_lines(floor=...) gives them), each
    converging line cut at the first step where its median reaches the floor: what follows is not a
    measurement but the floor itself (the raw curve goes on far below), so it is not drawn as data."""
    out = []
    for ln in lines:
        hit = np.flatnonzero(ln.y <= floor * (1 + 1e-9))
        if ln.diverged or not hit.size:
            out.append(ln)
            continue
        end = int(hit[0]) + 1
        cut = Line(ln.label, ln.x[:end], ln.y[:end], seeds=ln.seeds, style=ln.style, key=ln.key)
        cut.lo = ln.lo[:end] if ln.lo is not None else None
        cut.hi = ln.hi[:end] if ln.hi is not None else None
        out.append(cut)
    return out


def mark_floor(ax: Axes, lines: Sequence[Line], floor: float, what: str) -> None:
    """A dotted line at `floor` and, where each converging line reached it, a filled marker: the
    curve "reached tolerance" there (legend entry: `what`)."""
    ax.axhline(floor, color="0.35", linestyle=":", linewidth=0.9, zorder=1)
    reached = [ln for ln in lines if not ln.diverged and ln.y.size and ln.y[-1] <= floor * (1 + 1e-9)]
    for i, ln in enumerate(reached):
        color = ln.style.get("color", "0.3")
        ax.plot([ln.x[-1]], [ln.y[-1]], "v", color=color, markersize=6, clip_on=False, label=what if i == 0 else "_")


def seeds_note(lines: Sequence[Line]) -> str:
    """'median and IQR over 5 seeds' (or '2-5 seeds'), for the legend or a caption."""
    counts = sorted({ln.seeds for ln in lines if not ln.diverged})
    if not counts:
        return ""
    if counts == [1]:
        return "one run per line (no band)"
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"line: median, band: IQR over {n} seeds"


def _entries(ax: Axes, lines: Sequence[Line]) -> tuple[list[Any], list[str]]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    drawn, labels = ax.get_legend_handles_labels()
    handles: list[Any] = list(drawn)
    note = seeds_note(lines)
    if note:
        handles.append((Patch(facecolor="0.4", alpha=BAND_ALPHA, linewidth=0), Line2D([], [], color="0.4")))
        labels.append(note)
    return handles, labels


def add_legend(ax: Axes, lines: Sequence[Line], **kwargs: Any) -> None:
    """The lines' labels, then one entry saying what a line and its band are."""
    ax.legend(*_entries(ax, lines), **kwargs)


def figure_legend(fig: Figure, ax: Axes, lines: Sequence[Line]) -> None:
    """One legend below all panels, for figures whose panels draw the same lines (against sweeps,
    iterations and flops, say): `ax`'s labels and the note on bands."""
    handles, labels = _entries(ax, lines)
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4))
