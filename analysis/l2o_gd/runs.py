"""Which of a claim's runs a check reads: the learner's (algo l2o), at the paper's settings, or at given
values of the columns a grid varies."""

from __future__ import annotations

import pandas as pd


def l2o(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["algo"] == "l2o"] if "algo" in runs else runs


def paper_config(runs: pd.DataFrame) -> pd.DataFrame:
    """The paper's hyper-parameters where a grid varies them: Gaussian data, e = 100, lr = 1e-7."""
    r = l2o(runs)
    for col, val in (("data", "gauss"), ("e", 100.0), ("lr", 1e-7)):
        if col in r and (r[col] == val).any():
            r = r[r[col] == val]
    return r


def only(runs: pd.DataFrame, **fixed: object) -> pd.DataFrame:
    """Rows at the given values of the columns that have them (a grid that does not vary a column keeps all)."""
    r = l2o(runs)
    for col, val in fixed.items():
        if col in r and (r[col] == val).any():
            r = r[r[col] == val]
    return r
