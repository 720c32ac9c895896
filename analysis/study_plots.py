"""A study's optimisation history and slices, drawn in the house style (analysis.style) from the trials
Optuna holds, where Optuna's own matplotlib plots draw in its grey ggplot style with their own palette.

History: each complete trial's value (as Optuna was told it), the best so far as a step line, the trials
that ended otherwise (pruned, diverged, failed) as ticks along the bottom with their counts, and the
reference lines (each baseline's value, the study file's `reference:` values for the objective).
Slice: each searched param's value against the objective, one panel per param (a log axis where the
param was searched on one), the study file's `reference:` values for that param as vertical lines.

Optuna's objects are read by their public attributes, not imported: analysis.studies stays the only
analysis module that imports Optuna (tests/test_architecture.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from analysis.style import COLORS, new_figure

PANEL = (5.6, 3.8)  # two side by side on the report's page (analysis.studies.PLOT_SIZE)
OTHER_MARKS = {"pruned": "|", "diverged": "x", "failed": "s"}


def reference_line(i: int) -> dict[str, Any]:
    """The look of the i-th reference line: dashed, in a colour the trials' own points do not use."""
    return {"linestyle": "--", "linewidth": 1.2, "color": COLORS[(i + 2) % len(COLORS)]}


def history(
    study: Any,
    outcomes: dict[int, str],
    target_name: str,
    references: Sequence[tuple[str, float]] = (),
    outcome_style: dict[str, dict[str, Any]] | None = None,
) -> Any:
    """The optimisation history of a one-objective study (its Axes)."""
    style = outcome_style or {}
    fig, ax = new_figure(figsize=PANEL)
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state.name == "COMPLETE" and t.value is not None and math.isfinite(t.value)]
    maximize = study.direction.name == "MAXIMIZE"
    complete = style.get("complete", {"color": COLORS[0], "marker": "o"})
    ax.plot(
        [t.number for t in done],
        [t.value for t in done],
        linestyle="none",
        color=complete["color"],
        marker="o",
        alpha=0.8,
        label=f"complete ({len(done)})",
    )
    if done:
        best, xs, ys = None, [], []
        for t in done:
            best = t.value if best is None else (max(best, t.value) if maximize else min(best, t.value))
            xs.append(t.number)
            ys.append(best)
        ax.step(xs, ys, where="post", color=COLORS[6], linewidth=1.2, label="best so far")
    others: dict[str, list[int]] = {}
    for t in trials:
        if t in done or t.state.name in ("RUNNING", "WAITING"):
            continue
        kind = outcomes.get(t.number) or {"PRUNED": "pruned"}.get(t.state.name, "failed")
        if kind == "complete":  # told a value that is not finite
            kind = "failed"
        others.setdefault(kind, []).append(t.number)
    for kind, numbers in others.items():  # no value to draw: a tick on the bottom edge at its trial number
        look = style.get(kind, {"color": COLORS[4]})
        ax.plot(
            numbers,
            [0.02] * len(numbers),
            transform=ax.get_xaxis_transform(),
            linestyle="none",
            marker=OTHER_MARKS.get(kind, "|"),
            color=look["color"],
            markersize=7,
            mew=1.5,
            label=f"{kind} ({len(numbers)}, no value)",
        )
    for i, (label, value) in enumerate(references):
        ax.axhline(value, label=label, **reference_line(i))
    ax.set_xlabel("trial")
    ax.set_ylabel(target_name)
    ax.set_title("optimisation history")
    ax.legend(loc="best")
    return ax


def slices(
    study: Any,
    target: Callable[[Any], float] | None,
    target_name: str,
    references: Sequence[tuple[str, str, float]] = (),
) -> Any:
    """The objective against each searched param, one panel per param (its Axes, an array for several);
    `references`: (label, param, value) drawn as vertical lines on that param's panel."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE" and t.params]
    names = sorted({p for t in done for p in t.params})
    if not names:
        raise ValueError("no complete trial with searched params")
    value = target or (lambda t: t.value)
    width = PANEL[0] if len(names) == 1 else 3.6 * len(names)
    fig, axes = new_figure(1, len(names), figsize=(width, PANEL[1]), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        mine = [t for t in done if name in t.params]
        xs = [t.params[name] for t in mine]
        ys = [value(t) for t in mine]
        ax.scatter(xs, ys, c=[t.number for t in mine], cmap="viridis", s=18, alpha=0.9, label="complete trial")
        if getattr(mine[0].distributions.get(name), "log", False):  # searched on a log scale (float, int)
            ax.set_xscale("log")
        own = [(label, x) for label, param, x in references if param == name]
        for i, (label, x) in enumerate(own):
            ax.axvline(x, label=label, **reference_line(i))
        if own:
            ax.legend(loc="best")
        ax.set_xlabel(name)
        ax.set_ylabel(target_name)
    axes[0][0].set_title("slice (colour: trial number, dark first)")
    return axes[0][0] if len(names) == 1 else axes[0]
