"""ldminv's `theory_cost` read back from its axes (issue 45): an order L whose largest depth K never
reached the precision is a marked point, not a silent gap; both axes count (K·L, L) in integers; the
legend says over how many seeds the medians are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.figures import drawn, figure_for


def _runs() -> pd.DataFrame:
    """Fixed D-Minv: test loss 10^-(4 K (L - 1)) per seed (order 2 never gets below 1e-8 by K = 6)."""
    rows = [
        {
            "run_id": f"{L}-{K}-{s}",
            "status": "ok",
            "algo": "minv",
            "L": L,
            "K": K,
            "seed": s,
            "test_loss": 10.0 ** -(4 * K * (L - 1) if L > 2 else 2),
            "dtype": "float64",
        }
        for L in (2, 3, 4, 6)
        for K in range(1, 7)
        for s in (0, 1)
    ]
    return pd.DataFrame(rows)


def test_theory_cost_marks_the_order_that_never_got_there(tmp_path: Path) -> None:
    found = figure_for("ldminv", "small_theory_cost")
    assert found is not None and found[0] == "theory_cost"
    with drawn() as figures:
        found[1](_runs(), pd.DataFrame(columns=["run_id", "step"]), tmp_path)
    (fig,) = figures
    ax = fig.axes[0]
    marks = [ln for ln in ax.get_lines() if ln.get_marker() == "v"]
    assert len(marks) == 2 and all(np.asarray(ln.get_xdata()).tolist() == [2] for ln in marks)  # L = 2, each precision
    assert all("not reached by K ≤ 6" in str(ln.get_label()) for ln in marks)
    fig.canvas.draw()
    for axis in (ax.xaxis, ax.yaxis):
        ticks = np.asarray(axis.get_majorticklocs(), dtype=float)
        assert np.allclose(ticks, np.round(ticks)), ticks  # no 47.5 on a count
    legend = ax.get_legend()
    assert legend is not None and legend.get_title().get_text() == "median over 2 seeds"
    assert "K·L" in ax.get_ylabel() and ax.get_xlabel() == "order L"
