"""The step sweep of constant-step GD on least squares: the error against iterations, one line per
step (median over seeds, inter-quartile band); the steps that diverge are stubs that end where they
blow up (analysis.curve_plot), so they do not set the y-range."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.curve_plot import draw_lines, seed_lines
from analysis.figures import Figure, save_figure
from analysis.style import new_figure

ERR_LABEL = r"error to the optimum $\|(W - W^*)X\|_F^2\,/\,m$"


def _rule(key: dict) -> str:
    if key["lr_rule"] == "optimal":
        return r"optimal step $2/(\lambda_{\max} + \lambda_{\min})$"
    return rf"step $\eta$ = {key['lr']:g}"


def step_sweep(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    # sorted by rule, then step: the constant steps from small to large, the theory's step last
    lines = seed_lines(runs, curves, ["lr_rule", "lr"], "err", label=_rule)
    fig, ax = new_figure(figsize=(5.6, 3.8))
    draw_lines(ax, lines, "iteration t", ERR_LABEL)
    ax.set_title("constant-step GD on least squares")
    return save_figure(fig, out_dir, "err_by_step")


FIGURES: dict[str, Figure] = {"lsq_step_sweep": step_sweep}
