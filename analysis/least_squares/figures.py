"""The step sweep of constant-step GD on least squares: error against iterations, one line per step
(median over seeds, interquartile band), the steps that diverge drawn until they blow up."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from analysis.aggregate import curve_band


def step_sweep(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    runs = runs.assign(
        step_rule=runs["lr_rule"].where(runs["lr_rule"] == "optimal", "lr " + runs["lr"].map("{:g}".format))
    )
    band = curve_band(curves, runs, ["step_rule"], "step", "err")
    fig, ax = plt.subplots(figsize=(6, 4))
    for rule, line in band.groupby("step_rule"):
        ax.semilogy(line["step"], line["median"], label=str(rule))
        ax.fill_between(line["step"], line["q25"], line["q75"], alpha=0.2)
    ax.set_xlabel("iteration")
    ax.set_ylabel("error (W - W*) X X^T (W - W*)^T / m")
    ax.set_title("constant-step GD on least squares")
    ax.legend(fontsize=7)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "err_by_step.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return [path]


FIGURES = {"lsq_step_sweep": step_sweep}
