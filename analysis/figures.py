"""Which figure draws which grid: each learner's `figures` module exports FIGURES keyed by grid name
(and optionally ALIASES: grid -> the grid whose figure draws it); and what every figure shares: its
signature (`Figure`), its style (`analysis.style`, applied by `figure_for`) and how it is written to
disk (`save_figure`: a PNG for pages, an SVG beside it for papers)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from analysis.learners import module as learner_module
from analysis.style import DPI, styled

if TYPE_CHECKING:
    import matplotlib.figure

# (runs, curves, out_dir) -> the PNGs written: what a learner's FIGURES maps grid names to.
Figure = Callable[[pd.DataFrame, pd.DataFrame, Path], list[Path]]

REDUCED_PREFIXES = ("small_", "demo_")

# Figures saved while a `drawn()` block is open, innermost block last.
_watchers: list[list[matplotlib.figure.Figure]] = []


def figure_for(task: str, grid: str) -> tuple[str, Figure] | None:
    """(figure name, function drawing in the house style) for `grid` of `task`, or None."""
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
    return (name, styled(figures[name])) if name in figures else None


def is_reduced(grid: str) -> bool:
    """CI-sized or demo grids: they exercise the path, they do not reproduce the paper."""
    return grid.startswith(REDUCED_PREFIXES)


@contextlib.contextmanager
def drawn() -> Iterator[list[matplotlib.figure.Figure]]:
    """The figures `save_figure` writes inside the block, in order: their axes can be read back
    (`ax.get_xlim()`, `ax.get_lines()`), as the tests do."""
    seen: list[matplotlib.figure.Figure] = []
    _watchers.append(seen)
    try:
        yield seen
    finally:
        _watchers.remove(seen)


def save_figure(fig: matplotlib.figure.Figure, out_dir: Path, name: str, tight: bool = False) -> list[Path]:
    """Write `fig` as out_dir/name.png and name.svg (folder created) and return [the PNG] for FIGURES;
    `tight`: cut the page around everything drawn (legends placed outside the axes included)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    if fig.get_layout_engine() is None and not tight:  # figures of analysis.style.new_figure lay themselves out
        fig.tight_layout()
    bbox = "tight" if tight else None
    fig.savefig(path, dpi=DPI, bbox_inches=bbox)
    fig.savefig(path.with_suffix(".svg"), bbox_inches=bbox)
    for seen in _watchers:
        seen.append(fig)
    if "matplotlib.pyplot" in sys.modules:  # a figure made through pyplot stays open until closed
        sys.modules["matplotlib.pyplot"].close(fig)
    return [path]
