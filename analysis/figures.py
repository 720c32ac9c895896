"""Which figure draws which grid: each learner's `figures` module exports FIGURES keyed by grid name
(and optionally ALIASES: grid -> the grid whose figure draws it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from analysis.learners import module as learner_module

Figure = Callable[[pd.DataFrame, pd.DataFrame, Path], list[Path]]

REDUCED_PREFIXES = ("small_", "demo_")


def figure_for(task: str, grid: str) -> tuple[str, Figure] | None:
    """(figure name, function) drawing `grid` of `task`, or None."""
    found = learner_module(task, "figures")
    if found is None:
        return None
    figures: dict[str, Figure] = found.FIGURES
    # ALIASES: grids drawn by another grid's figure (same axes, smaller or differently named sweep).
    aliases: dict[str, str] = getattr(found, "ALIASES", {})
    name = aliases.get(grid, grid)
    for prefix in REDUCED_PREFIXES:
        if name.startswith(prefix) and name not in figures:
            name = aliases.get(name[len(prefix) :], name[len(prefix) :])
    return (name, figures[name]) if name in figures else None


def is_reduced(grid: str) -> bool:
    """CI-sized or demo grids: they exercise the path, they do not reproduce the paper."""
    return grid.startswith(REDUCED_PREFIXES)
