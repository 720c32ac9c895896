"""analysis.aggregate: the one statistics module of figures, claims and reports (no store needed)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.aggregate import (
    band,
    median,
    median_by,
    medians,
    never_as_inf,
    over_seeds,
    quartiles,
    seed_quartiles,
)

INF = np.inf


def test_quartiles_match_numpy_on_finite_values() -> None:
    rng = np.random.default_rng(0)
    for n in range(1, 12):
        v = rng.lognormal(size=n)
        q25, med, q75 = quartiles(v)
        assert (q25, q75) == pytest.approx(tuple(np.quantile(v, [0.25, 0.75])), rel=1e-12)
        assert med == np.median(v) == pd.Series(v).median()  # bit for bit: claims quote this number


def test_median_is_the_claims_median_bit_for_bit() -> None:
    """Figures (quartiles) and claims (pandas groupby median) must print the same number."""
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"g": rng.integers(0, 5, 200), "v": rng.lognormal(size=200) * 1e3})
    by_group = frame.groupby("g")["v"].median()
    for g, grp in frame.groupby("g"):
        assert median(grp["v"]) == by_group[g]
    assert median_by(frame["v"], frame["g"]).equals(by_group)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 2, INF], (1.5, 2.0, INF)),  # numpy: (1.5, nan, nan)
        ([1, INF, INF], (INF, INF, INF)),
        ([1, 2, 3, INF], (1.75, 2.5, INF)),
        ([1, INF], (INF, INF, INF)),
        ([INF, INF], (INF, INF, INF)),
        ([3.0, np.nan, 1.0], (1.5, 2.0, 2.5)),  # missing values are skipped
        ([], (np.nan, np.nan, np.nan)),
    ],
)
def test_quartiles_are_safe_with_infinities(values: list[float], expected: tuple[float, float, float]) -> None:
    assert quartiles(values) == pytest.approx(expected, nan_ok=True)


def test_never_as_inf_turns_unreached_and_missing_into_inf() -> None:
    out = never_as_inf(pd.Series([5, -1, np.nan, 0]))
    assert out.tolist() == [5.0, INF, INF, 0.0]
    assert never_as_inf(pd.Series([-1.0, np.nan]), never=None).tolist() == [-1.0, INF]


def test_medians_count_unreached_as_worse() -> None:
    runs = pd.DataFrame({"L": [1, 1, 3, 3], "t": [10.0, 12.0, 5.0, -1.0]})
    med = medians(runs, ["L"], "t")
    assert med[1] == 11.0 and med[3] == INF


def test_seed_quartiles_keep_a_missing_key_as_its_own_group() -> None:
    frame = pd.DataFrame({"lr": [0.1, 0.1, 0.1, np.nan, np.nan], "err": [3.0, 1.0, 2.0, 7.0, np.nan]})
    out = seed_quartiles(frame, ["lr"], "err")
    assert out["n"].tolist() == [3, 1]
    assert out[["q25", "median", "q75"]].iloc[0].tolist() == [1.5, 2.0, 2.5]
    assert out["median"].iloc[1] == 7.0 and np.isnan(out["lr"].iloc[1])


def test_band_treats_a_diverged_step_as_missing() -> None:
    curves = pd.DataFrame({"step": [1, 1, 1, 2, 2, 2], "err": [1.0, 2.0, 3.0, 0.5, INF, np.nan]})
    out = band(curves, ["step"], "err").set_index("step")
    assert out.loc[1, ["median", "q25", "q75", "n"]].tolist() == [2.0, 1.5, 2.5, 3]
    assert out.loc[2, ["median", "n"]].tolist() == [0.5, 1]


def test_over_seeds_interval_needs_two_values() -> None:
    frame = pd.DataFrame({"g": ["a", "a", "a", "b"], "v": [1.0, 2.0, 3.0, 4.0]})
    out = over_seeds(frame, ["g"], "v").set_index("g")
    half = 4.302652729911275 * 1.0 / np.sqrt(3)  # t_{0.975, 2} * sd / sqrt(n)
    assert out.loc["a", "ci_high"] == pytest.approx(2.0 + half) and out.loc["a", "n"] == 3
    assert out.loc["b", "mean"] == 4.0 and np.isnan(out.loc["b", "ci_low"])
