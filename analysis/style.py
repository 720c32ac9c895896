"""One look for every learner's figures: sizes, fonts, line widths and a colour-blind-safe palette.

The palette is Okabe and Ito's (Color Universal Design, 2008): colours that stay distinct under the
common colour-vision deficiencies. Beyond seven lines the colours repeat with another dash pattern
(`line`).

Nothing here touches matplotlib's global state: `context()` applies the style around one figure's
drawing (`analysis.figures.figure_for` wraps every registered figure in it), and `new_figure` makes a
`matplotlib.figure.Figure` without pyplot, so importing a figure module (as `convgrid check` does
through the claims) loads no plotting backend.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import wraps
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Okabe-Ito, in the order lines are given them; its yellow is left out (a thin yellow line on white is
# hard to see), so the eighth line is the first colour dashed.
COLORS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
DASHES = ("-", "--", ":", "-.")
BAND_ALPHA = 0.2  # the inter-quartile band behind a median line
ERRORBAR_NOTE = "points: median over seeds, bars: IQR"  # the legend title of figures with error bars
DPI = 150  # of the PNGs (the SVG beside each is resolution-free)
PANEL = (4.6, 3.4)  # inches per panel: two or three panels side by side fit a page's width

RC: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 7.5,
    "legend.frameon": False,
    "figure.titlesize": 10,
    "lines.linewidth": 1.5,
    "lines.markersize": 4,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "savefig.dpi": DPI,
    "svg.fonttype": "none",  # text stays text in the SVG (searchable, editable, small)
}

P = ParamSpec("P")
R = TypeVar("R")


def color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def line(i: int) -> dict[str, str]:
    """Colour and dash of the i-th line: the palette solid, then the same colours dashed, and so on."""
    return {"color": color(i), "linestyle": DASHES[(i // len(COLORS)) % len(DASHES)]}


@contextlib.contextmanager
def context() -> Iterator[None]:
    """The style, applied while the block draws and saves (matplotlib reads most settings as artists
    are made, so a figure must be drawn and saved inside it)."""
    import matplotlib
    from cycler import cycler

    rc: Any = {**RC, "axes.prop_cycle": cycler(color=list(COLORS))}
    with matplotlib.rc_context(rc):
        yield


def styled(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn`, drawing in the style."""

    @wraps(fn)
    def inner(*args: P.args, **kwargs: P.kwargs) -> R:
        with context():
            return fn(*args, **kwargs)

    return inner


def new_figure(
    nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] | None = None, squeeze: bool = True, **subplots: Any
) -> tuple[Figure, Any]:
    """A figure and its axes as `pyplot.subplots` gives them (one Axes, or an array of them; always
    2-D with squeeze=False), laid out by matplotlib's constrained layout so that titles, labels and
    legends never overlap; made without pyplot (nothing to close, no backend loaded)."""
    from matplotlib.figure import Figure

    size = figsize or (PANEL[0] * ncols, PANEL[1] * nrows)
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=squeeze, **subplots)
    return fig, axes
