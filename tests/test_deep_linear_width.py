"""deep_linear: Thm 3.1 width independence (spec T1) and its negative control."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest

from tasks.base import RunContext
from tasks.deep_linear.task import DeepLinearTask

TASK = DeepLinearTask()
ADAPTER = pydantic.TypeAdapter(TASK.Params)
WIDTHS = [12, 18, 24, 48]  # all >= max(d_in, d_out) = 12
BASE = dict(d_in=12, d_out=4, m=50, L=4, n_iters=60, seed=3)


def curves(algo_kw: dict, init: str) -> list[np.ndarray]:
    out = []
    for w in WIDTHS:
        res = TASK.run(ADAPTER.validate_python({**BASE, **algo_kw, "init": init, "width": w}), RunContext())
        assert res.status == "ok"
        out.append(np.array(res.curve["err"]))
    return out


def max_rel_diff(cs: list[np.ndarray]) -> float:
    ref = cs[0]
    mask = ref > 1e-10  # below the plotting floor the comparison is rounding noise
    return max(float(np.max(np.abs(c[mask] - ref[mask]) / ref[mask])) for c in cs[1:])


ALGOS = {"bcgd": ({"algo": "bcgd"}, 1e-8), "gd": ({"algo": "gd", "lr": 0.01}, 1e-10)}


@pytest.mark.parametrize("init", ["orth_identity", "balanced", "identity"])
@pytest.mark.parametrize("algo", ["bcgd", "gd"])
def test_trajectory_independent_of_width(init, algo):
    kw, tol = ALGOS[algo]
    cs = curves(kw, init)
    assert cs[0][-1] < 0.5 * cs[0][0]  # it does train
    assert max_rel_diff(cs) < tol


@pytest.mark.parametrize("init", ["orthogonal", "random"])
def test_full_width_orthogonal_and_random_depend_on_width(init):
    """Negative control: these inits put random mass in the extra width, so width matters."""
    cs = curves({"algo": "bcgd"}, init)
    assert max_rel_diff(cs) > 0.1
