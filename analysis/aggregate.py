"""Statistics over seeds, in one place: every figure, claim and report takes its medians, inter-quartile
ranges and intervals from here, so that a number drawn in a figure and the same number quoted by a
claim are computed the same way.

Two kinds of input and their conventions:
- scalars of runs (one value per seed, e.g. iterations to a threshold): a run that never reached the
  threshold is stored as null (pandas' <NA> in a nullable Int64 column; stores written before said -1)
  and is best counted as +inf (`never_as_inf`), so that it can only make the median worse instead of
  dropping out; quartiles are inf-safe.
- curves (one value per run and step): a non-finite value (a diverged step) is missing, so the band
  of a group is drawn from the runs still finite at that step.

Any param may group: list-valued ones (deep_linear's `widths`) are grouped as tuples (`group_keys`);
curves share no column with runs but run_id (a curve field named like a runs column is stored as
`<name>_t`, deep_linear's `lr_t` beside its param `lr`), so `by` names runs columns and `x` / `y`
curve columns (`curve_band`). A statistic named like a group key gets the suffix
`_stat` (linear_resnet's param `n`, the number of samples: the count of runs is then `n_stat`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

QUARTILES = (0.25, 0.5, 0.75)
STATISTICS = ("n", "median", "q25", "q75", "mean", "ci_low", "ci_high")


def stat_names(by: Sequence[str]) -> dict[str, str]:
    """The output column of each statistic, `_stat` appended where a group key has its name."""
    return {s: f"{s}_stat" if s in by else s for s in STATISTICS}


def never_as_inf(values: pd.Series, never: float | None = -1) -> pd.Series:
    """`values` as floats with a missing value (never reached), and the `never` sentinel where given
    (-1: what stores written before null said), replaced by +inf."""
    out = values.astype(float).fillna(np.inf)
    return out.where(out != never, np.inf) if never is not None else out


def quartiles(values: Any) -> tuple[float, float, float]:
    """(q25, median, q75) of the non-missing `values`, linear between order statistics as numpy and
    pandas do, but safe with infinities: numpy's lerp turns (inf - inf) * 0 into nan, here a quantile
    that falls on an order statistic is that statistic and one next to +inf is +inf. The median is
    (a + b) / 2 of the two middle values, bit for bit pandas' median."""
    v = np.sort(np.asarray(values, dtype=float).ravel())
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (np.nan, np.nan, np.nan)
    out = []
    for q in QUARTILES:
        pos = q * (v.size - 1)
        lo = int(np.floor(pos))
        t = pos - lo
        a = float(v[lo])
        b = float(v[min(lo + 1, v.size - 1)])
        if t == 0 or a == b:
            out.append(a)
        elif np.isinf(a) or np.isinf(b):
            out.append(b if np.isinf(b) else a)  # +inf above wins; -inf below wins
        elif t == 0.5:
            out.append((a + b) / 2)
        else:
            out.append(a + (b - a) * t)
    return (out[0], out[1], out[2])


def median(values: Any) -> float:
    """Median of the non-missing `values` (inf-safe; nan when there are none)."""
    return quartiles(values)[1]


def _hashable(value: Any) -> Any:
    if isinstance(value, list | tuple | np.ndarray):
        return tuple(_hashable(v) for v in value)
    return value.item() if isinstance(value, np.generic) else value


def group_keys(frame: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """`frame` with its `by` columns groupable: list or array values (a list param, as the store gives
    it back) become tuples; other columns are left as they are."""
    listy = [
        col
        for col in by
        if frame[col].dtype == object and frame[col].map(lambda v: isinstance(v, list | np.ndarray)).any()
    ]
    return frame.assign(**{col: frame[col].map(_hashable) for col in listy}) if listy else frame


def seed_quartiles(frame: pd.DataFrame, by: Sequence[str], value: str) -> pd.DataFrame:
    """Per group of `by` (missing keys kept as a group, sorted): n (non-missing values), q25, median,
    q75 of `value`. Convert sentinels with `never_as_inf` first where unreached must count as worse."""
    rows = []
    for key, grp in group_keys(frame, by).groupby(list(by), dropna=False, sort=True):
        keys = key if isinstance(key, tuple) else (key,)
        q25, med, q75 = quartiles(grp[value])
        rows.append((*keys, int(grp[value].notna().sum()), q25, med, q75))
    names = stat_names(by)
    return pd.DataFrame(rows, columns=[*by, names["n"], names["q25"], names["median"], names["q75"]])


def median_by(values: pd.Series, keys: Sequence[pd.Series] | pd.Series) -> pd.Series:
    """Median of `values` per group of `keys` (missing values skipped; groups with a missing key dropped),
    indexed by the keys: the seed median a claim quotes."""
    return values.astype(float).groupby(keys if isinstance(keys, pd.Series) else list(keys)).median()


def medians(runs: pd.DataFrame, by: Sequence[str], value: str, never: float | None = -1) -> pd.Series:
    """Median of `value` over seeds per group. A run that never reached the threshold (a missing value,
    or `never`: -1 from older stores) counts as inf, so it can only make the median worse, never drop out."""
    return median_by(never_as_inf(runs[value], never), [runs[b] for b in by])


def median_table(runs: pd.DataFrame, by: Sequence[str], cols: Sequence[str]) -> pd.DataFrame:
    """Median (over seeds, missing values skipped) of several summary columns per group, with n_runs."""
    g = runs.groupby(list(by), dropna=False)
    out = g[list(cols)].median()
    out["n_runs"] = g.size()
    return out.reset_index()


def band(frame: pd.DataFrame, by: Sequence[str], value: str) -> pd.DataFrame:
    """Per group of `by`: median, q25, q75 and n (finite values) of `value`, inf counted as missing:
    the band of a curve over seeds at each step (vectorised; curves have many steps)."""
    finite = group_keys(frame, by).assign(**{value: frame[value].astype(float).replace([np.inf, -np.inf], np.nan)})
    grouped = finite.groupby(list(by), dropna=False, sort=True)[value]
    names = stat_names(by)
    out = pd.DataFrame(
        {
            names["median"]: grouped.median(),
            names["q25"]: grouped.quantile(0.25),
            names["q75"]: grouped.quantile(0.75),
            names["n"]: grouped.count(),
        }
    )
    return out.reset_index()


def curve_band(curves: pd.DataFrame, runs: pd.DataFrame, by: Sequence[str], x: str, y: str) -> pd.DataFrame:
    """Median and IQR of curve column `y` at each `x`, per group of run params `by` (seeds pooled).

    `by` names run columns and `x`, `y` curve columns (deep_linear's curve `lr_t` is the step taken
    at each iteration, its run `lr` the param); a frame built by hand with a name in both still works."""
    if x in by:
        raise ValueError(f"x {x!r} is also a group key in by={list(by)}: the band's columns would clash")
    # The curve's columns under names no run column has, so the merge cannot suffix them away.
    picked = pd.DataFrame({"run_id": curves["run_id"], "__x": curves[x], "__y": curves[y]})
    merged = picked.merge(runs[["run_id", *by]], on="run_id")
    return band(merged, [*by, "__x"], "__y").rename(columns={"__x": x})


def mean_interval(values: Any, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t interval of the mean of the non-missing `values`."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return (np.nan, np.nan, np.nan)
    mean = float(v.mean())
    if v.size < 2 or not np.isfinite(v).all():  # no spread to speak of with an unreached (inf) value
        return (mean, np.nan, np.nan)
    half = float(stats.t.ppf(0.5 + confidence / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return (mean, mean - half, mean + half)


def over_seeds(
    frame: pd.DataFrame, by: Sequence[str], value: str, confidence: float = 0.95, unreached: bool = False
) -> pd.DataFrame:
    """Per group of `by`: n, median, q25, q75, mean and the t-interval of the mean of `value`.

    A missing value is skipped (n counts the values there are), which is right for a metric a run may
    not have. For a threshold metric (iterations or sweeps to a tolerance) a missing value is a run that
    never got there: `unreached=True` counts it as +inf, as `medians` and the claims do, so that it makes
    the median worse instead of dropping out (the mean and its interval are then inf)."""
    if unreached:
        frame = frame.assign(**{value: never_as_inf(frame[value])})
    out = seed_quartiles(frame, by, value)
    groups = group_keys(frame, by).groupby(list(by), dropna=False, sort=True)
    intervals = [mean_interval(grp[value], confidence) for _, grp in groups]
    names = stat_names(by)
    out[[names["mean"], names["ci_low"], names["ci_high"]]] = pd.DataFrame(intervals, index=out.index)
    return out[[*by, *names.values()]]
