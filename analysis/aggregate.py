"""Aggregation over seeds: median with inter-quartile range, mean with a 95% confidence interval."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy import stats


def over_seeds(frame: pd.DataFrame, by: Sequence[str], value: str, confidence: float = 0.95) -> pd.DataFrame:
    """Per group of `by`: n, median, q25, q75, mean and the t-interval of the mean of `value`."""

    def summarise(x: pd.Series) -> pd.Series:
        x = x.dropna().astype(float)
        n = len(x)
        mean = float(x.mean()) if n else np.nan
        half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / np.sqrt(n)) if n > 1 else np.nan
        return pd.Series(
            {
                "n": n,
                "median": float(x.median()) if n else np.nan,
                "q25": float(x.quantile(0.25)) if n else np.nan,
                "q75": float(x.quantile(0.75)) if n else np.nan,
                "mean": mean,
                "ci_low": mean - half,
                "ci_high": mean + half,
            }
        )

    out = frame.groupby(list(by), dropna=False)[value].apply(summarise).unstack()
    out["n"] = out["n"].astype(int)
    return out.reset_index()


def curve_band(curves: pd.DataFrame, runs: pd.DataFrame, by: Sequence[str], x: str, y: str) -> pd.DataFrame:
    """Median and IQR of curve column `y` at each `x`, per group of run params `by` (seeds pooled)."""
    merged = curves.merge(runs[["run_id", *by]], on="run_id")
    grouped = merged.groupby([*by, x], dropna=False)[y]
    band = grouped.agg(median="median", q25=lambda s: s.quantile(0.25), q75=lambda s: s.quantile(0.75), n="count")
    return band.reset_index()
