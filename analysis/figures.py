"""Which figure draws which grid: each learner's `figures` module exports FIGURES keyed by grid name
(and optionally ALIASES: grid -> the grid whose figure draws it); and what every figure shares: its
signature (`Figure`) and how it is written to disk (`save_figure`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from analysis.learners import module as learner_module

if TYPE_CHECKING:
    import matplotlib.figure

# (runs, curves, out_dir) -> the PNGs written: what a learner's FIGURES maps grid names to.
Figure = Callable[[pd.DataFrame, pd.DataFrame, Path], list[Path]]
DPI = 120

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


def save_figure(fig: matplotlib.figure.Figure, out_dir: Path, name: str) -> list[Path]:
    """Write `fig` as out_dir/name.png (folder created), close it, and return [path] for FIGURES."""
    # pyplot is imported here, not at module level: `convgrid check` imports this module for
    # is_reduced and needs no plotting.
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return [path]
