"""The learner's r_T against the epochs it trained (issue 29): the paper trains 50,000 epochs, a CPU affords
100-5,000, so a comparison with a constant step decided short of that budget is "undecided at this budget"
unless the measured trend settles it. The r_T curve (logged every `log_every` epochs) gives the whole
ladder of one run: full-batch GD at a constant lr is deterministic, so the curve's r_T at epoch k is what
a k-epoch run ends at.

The trend rule: r_T already above the baseline decides "holds"; a run at the paper's budget below it
decides "does not hold"; short of it, "does not hold" only when r_T rises ever more slowly (concave over
the last two fifths of the run) and even its current rate continued linearly to 50,000 epochs stays below
the baseline (a concave curve stays under that line). Otherwise the verdict is "undecided at this budget".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.claims import FAILS, HOLDS, UNDECIDED, VerdictText

PAPER_EPOCHS = 50_000  # sec. 6.3: 50,000 training epochs
LADDER = (100, 500, 1_000, 2_000, 3_000, 5_000, 10_000, 20_000, 50_000)  # the epochs a ladder table shows


@dataclass(frozen=True)
class Trend:
    epochs: int  # the last logged epoch
    final: float  # r_T there
    slope: float  # r_T per 100 epochs over the last fifth of the run
    previous: float  # the same over the fifth before it
    reach: float  # final + slope continued linearly to PAPER_EPOCHS (capped at 1: r_T < 1 always)

    @property
    def concave(self) -> bool:
        return self.slope <= self.previous

    def text(self) -> str:
        return (
            f"r_T {self.final:.4f} at epoch {self.epochs}, rising {self.slope:+.2g} per 100 epochs "
            f"(the fifth before: {self.previous:+.2g}); that rate continued to {PAPER_EPOCHS} epochs: {self.reach:.3f}"
        )


def r_t_curve(curves: pd.DataFrame, run_id: str, column: str = "imp_last_t") -> pd.Series:
    """r_T (or another curve column) by epoch for one run, epoch 0 excluded."""
    c = curves[(curves["run_id"] == run_id) & (curves["step"] > 0)].dropna(subset=[column])
    return c.groupby("step")[column].median().sort_index()


def trend(curve: pd.Series) -> Trend | None:
    """The rise of r_T over the last two fifths of a logged curve (None with fewer than 5 points)."""
    if len(curve) < 5:
        return None
    end = float(curve.index.max())

    def at(epoch: float) -> float:
        return float(curve[curve.index <= epoch].iloc[-1])

    last, mid, early = at(end), at(0.8 * end), at(0.6 * end)
    slope = (last - mid) / (0.2 * end) * 100
    previous = (mid - early) / (0.2 * end) * 100
    reach = min(1.0, last + max(slope, 0.0) * (PAPER_EPOCHS - end) / 100)
    return Trend(int(end), last, slope, previous, reach)


def decide(tr: Trend, baseline: float) -> VerdictText:
    """Holds / does not hold / undecided at this budget for "the learner's r_T beats `baseline`"."""
    if tr.final > baseline:
        return HOLDS
    if tr.epochs >= PAPER_EPOCHS or (tr.concave and tr.reach < baseline):
        return FAILS
    return UNDECIDED


def budget_text(epochs: int) -> str:
    return f"{epochs} of the paper's {PAPER_EPOCHS} epochs"


def ladder_table(runs: pd.DataFrame, curves: pd.DataFrame, tuned: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per learner run and rung of LADDER it reached: r_T and mean_t r_t at that epoch, beside the
    run's 2/(beta+beta0) and best scanned c (and the Optuna-tuned c of its problems, when given by run id)."""
    rows = []
    for r in runs.itertuples():
        rt, mean = r_t_curve(curves, r.run_id), r_t_curve(curves, r.run_id, "imp_mean_t")
        for k in LADDER:
            if rt.empty or k > rt.index.max():
                continue
            row = {
                "lr": r.lr,
                "seed": r.seed,
                "epoch": k,
                "r_T": float(rt[rt.index <= k].iloc[-1]),
                "mean_t r_t": float(mean[mean.index <= k].iloc[-1]) if not mean.empty else np.nan,
                "r_T 2/(beta+beta0)": r.imp_last_opt,
                "r_T best scanned c": r.imp_last_best_c,
            }
            if tuned is not None:
                row["r_T Optuna-tuned c"] = tuned.get(r.run_id, np.nan)
            rows.append(row)
    return pd.DataFrame(rows)
