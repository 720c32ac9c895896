"""Which figure draws which grid: each paper's figure module exports FIGURES keyed by grid name."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path

import pandas as pd

Figure = Callable[[pd.DataFrame, pd.DataFrame, Path], list[Path]]

# task -> module with a FIGURES dict. Modules import lazily (matplotlib is slow to import).
FIGURE_MODULES: dict[str, str] = {
    "deep_linear": "analysis.figures_deep_linear",
    "linear_resnet": "analysis.figures_linear_resnet",
}
# Grids that are drawn by another grid's figure (same axes, smaller or differently named sweep).
ALIASES: dict[str, str] = {"demo_depth": "fig2_depth"}
REDUCED_PREFIXES = ("small_", "demo_")


def figure_for(task: str, grid: str) -> tuple[str, Figure] | None:
    """(figure name, function) drawing `grid` of `task`, or None."""
    module = FIGURE_MODULES.get(task)
    if module is None:
        return None
    figures: dict[str, Figure] = importlib.import_module(module).FIGURES
    name = ALIASES.get(grid, grid)
    for prefix in REDUCED_PREFIXES:
        if name.startswith(prefix) and name not in figures:
            name = ALIASES.get(name[len(prefix) :], name[len(prefix) :])
    return (name, figures[name]) if name in figures else None


def is_reduced(grid: str) -> bool:
    """CI-sized or demo grids: they exercise the path, they do not reproduce the paper."""
    return grid.startswith(REDUCED_PREFIXES) or grid in ALIASES
