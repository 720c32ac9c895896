"""The learner's r_T against the epochs it trained (issue 29): the paper trains 50,000 epochs, a CPU affords
100-5,000, so a comparison with a constant step decided short of that budget is "undecided at this budget"
unless the measured trend settles it. The r_T curve (logged every `log_every` epochs) gives the whole
ladder of one run: full-batch GD at a constant lr is deterministic, so the curve's r_T at epoch k is what
a k-epoch run ends at.

The trend rule, symmetric (issue 43): r_T above the baseline by more than the undecided band (the margin the
problem draws' spread justifies) decides "holds"; a run at the paper's budget below it by more than the band
decides "does not hold"; short of that budget, "does not hold" only when r_T rises ever more slowly (concave
over the last two fifths of the run) and even its current rate continued linearly to 50,000 epochs stays
below the baseline by more than the band (a concave curve stays under that line). Otherwise the verdict is
"undecided at this budget". A win inside the band is no more a win than a loss inside it is a loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.claims import FAILS, HOLDS, UNDECIDED, VerdictText, paired_verdict

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


def decide(tr: Trend, baseline: float, band: float) -> VerdictText:
    """Holds / does not hold / undecided at this budget for "the learner's r_T beats `baseline`", with an
    undecided band of +-`band` around it (inf: one draw, nothing is decided)."""
    if tr.final > baseline + band:
        return HOLDS
    if tr.final < baseline - band and (tr.epochs >= PAPER_EPOCHS or (tr.concave and tr.reach < baseline - band)):
        return FAILS
    return UNDECIDED


def held_out_pairs(r: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """One row per problem draw (seed): the learner's r_T at the lr that does best on the OTHER draws (so the
    lr is never chosen on the problem it is judged on), the baseline's r_T on the same draw, and that lr."""
    rows = []
    for seed, own in r.groupby("seed"):
        others = r[r["seed"] != seed]
        pick = others if not others.empty else own  # one draw: nothing to hold out (decides nothing anyway)
        lr = float(pick.groupby("lr")["imp_last"].median().idxmax())
        at = own[own["lr"] == lr]
        if at.empty:
            continue
        rows.append(
            {
                "seed": seed,
                "lr": lr,
                "run_id": at["run_id"].iloc[0],
                "learner": float(at["imp_last"].median()),
                "baseline": float(at[baseline].median()),
                "held_out": not others.empty,
            }
        )
    return pd.DataFrame(rows, columns=["seed", "lr", "run_id", "learner", "baseline", "held_out"])


def decide_paired(
    pairs: pd.DataFrame, curves: pd.DataFrame | None, epochs: int, what: str
) -> tuple[VerdictText, str, str, str]:
    """(verdict, measured, lacks, trend text) for "the learner beats the baseline" on `held_out_pairs`: the
    symmetric paired rule (analysis.claims.paired_verdict), and short of the paper's budget a loss only where
    the median curve's trend settles it beyond the same band."""
    diffs = pairs["learner"] - pairs["baseline"]
    verdict, measured, lacks = paired_verdict(diffs.tolist(), what)
    band = 2 * float(diffs.std(ddof=1)) / np.sqrt(len(diffs)) if len(diffs) > 1 else np.inf
    trend_text = ""
    tr = None
    if curves is not None and not pairs.empty:
        tr = trend(pd.concat([r_t_curve(curves, rid) for rid in pairs["run_id"]], axis=1).median(axis=1))
    if tr is not None:
        trend_text = f"; median over draws: {tr.text()}"
    if verdict == FAILS and epochs < PAPER_EPOCHS:
        verdict = UNDECIDED if tr is None else decide(tr, float(pairs["baseline"].median()), band)
        lacks = "" if verdict == FAILS else f"a longer budget: {budget_text(epochs)}"
    lrs = ", ".join(sorted({f"{x:g}" for x in pairs["lr"]}))
    text = (
        f"{epochs} epochs, the learner's lr chosen on the other draws ({lrs or '-'}): {measured}; medians r_T "
        f"learner {pairs['learner'].median():.4f}, baseline {pairs['baseline'].median():.4f}"
    )
    return verdict, text, lacks, trend_text


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
