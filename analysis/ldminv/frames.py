"""Small selectors shared by the figures and the claims of ldminv (pandas only)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from analysis.load import finished


def done(runs: pd.DataFrame) -> pd.DataFrame:
    return finished(runs)


def minv(runs: pd.DataFrame) -> pd.DataFrame:
    r = done(runs)
    return r[r["algo"] == "minv"] if "algo" in r else r


def dsvd(runs: pd.DataFrame) -> pd.DataFrame:
    r = done(runs)
    return r[r["algo"] == "dsvd"] if "algo" in r else r


def trained(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["iters"].astype(float) > 0]


def opt_label(runs: pd.DataFrame) -> pd.Series:
    return runs["optimizer"].astype(str) + " " + runs["lr"].map(lambda v: f"{float(v):g}")


def med(runs: pd.DataFrame, by: list[str], col: str) -> pd.Series:
    v = runs[col].astype(float).replace([np.inf, -np.inf], np.nan)
    return v.groupby([runs[b] for b in by]).median()


def coeffs(value: str) -> list[float]:
    return [float(x) for x in json.loads(value)] if isinstance(value, str) and value else []


def log10(x: pd.Series | np.ndarray | float) -> np.ndarray:
    return np.log10(np.clip(np.asarray(x, dtype=float), 1e-300, None))
