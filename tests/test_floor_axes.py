"""The deep linear figures read back from their axes (issue 45): a curve that reaches the paper's 1e-10
floor ends there with a marker ("reached the floor"), it is never drawn flat along it as if measured;
one y label per row; the flops axis names its power of ten in the label, not in an offset text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.deep_linear.figures import FLOOR
from analysis.figures import drawn, figure_for


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two depths, two seeds: err = 10^-t/(L+1) per step, far below the floor by step 100 (as raw
    curves go on to 1e-29); flops 1e6 per step."""
    runs, rows = [], []
    for L in (1, 4):
        for seed in (0, 1):
            rid = f"{L}-{seed}"
            runs.append({"run_id": rid, "status": "ok", "L": L, "seed": seed, "loss": "l2"})
            for t in range(0, 101):
                err = 10.0 ** (-t / (L + 1)) * (1 + 0.01 * seed)
                rows.append({"run_id": rid, "step": t, "sweep": t / L, "err": err, "flops_t": 1e6 * t})
    return pd.DataFrame(runs), pd.DataFrame(rows)


def test_a_curve_ends_where_it_reaches_the_floor(tmp_path: Path) -> None:
    found = figure_for("deep_linear", "fig2_depth")
    assert found is not None
    runs, curves = _frames()
    with drawn() as figures:
        found[1](runs, curves, tmp_path)
    (fig,) = figures
    for ax in fig.axes:
        medians = [ln for ln in ax.get_lines() if str(ln.get_label()).startswith("L = ")]
        assert len(medians) == 2
        for ln in medians:
            y = np.asarray(ln.get_ydata(), dtype=float)
            assert (y[:-1] > FLOOR * (1 + 1e-9)).all() and y[-1] <= FLOOR * (1 + 1e-9)  # no flat run on the floor
        ends = [ln for ln in ax.get_lines() if ln.get_marker() == "v"]
        assert len(ends) == 2  # each depth marked where it reached the floor
        end_x = {float(np.asarray(ln.get_xdata(), dtype=float)[0]) for ln in ends}
        assert end_x == {float(np.asarray(ln.get_xdata(), dtype=float)[-1]) for ln in medians}
    assert [bool(ax.get_ylabel()) for ax in fig.axes] == [True, False, False]  # one y label for the row
    flops = fig.axes[2]
    fig.canvas.draw()
    assert "10^{7}" in flops.get_xlabel() and flops.xaxis.get_offset_text().get_text() == ""
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("reached the floor 1e-10" in t for t in labels) and any("over 2 seeds" in t for t in labels)
