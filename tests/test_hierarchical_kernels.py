"""hierarchical: the C6 baselines against independent computations: the NTK formula against the empirical
NTK of a wide 2-layer ReLU net (autograd), the row-blocked Grams against one block, and polynomial kernel
ridge that fits the target exactly once its degree reaches the target's and not below."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from pydantic import TypeAdapter

from tasks.common import generator
from tasks.hierarchical.data import make_data
from tasks.hierarchical.kernels import by_rows, ntk_relu, poly_kernel, run_kernel
from tasks.hierarchical.params import HierarchicalParams, KernelParams
from tasks.hierarchical.target import make_target

ADAPTER = TypeAdapter(HierarchicalParams)


def test_ntk_formula_is_the_empirical_ntk_of_a_wide_relu_net() -> None:
    """f(x) = m^-1/2 sum_i v_i relu(<w_i, x>/sqrt d), all of w and v trained: the empirical NTK
    <df(x)/dtheta, df(x')/dtheta> at initialisation converges to ntk_relu as m grows (error ~ m^-1/2)."""
    d, m, n = 5, 200_000, 6
    g = generator(0, "test", "ntk")
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * torch.linspace(0.5, 2.0, n, dtype=torch.float64)[:, None]
    w = torch.randn(m, d, generator=g, dtype=torch.float64).requires_grad_(True)
    v = torch.randn(m, generator=g, dtype=torch.float64).requires_grad_(True)
    grads = []
    for xi in x:
        f = (v * torch.relu(w @ xi / math.sqrt(d))).sum() / math.sqrt(m)
        gw, gv = torch.autograd.grad(f, [w, v])
        grads.append(torch.cat([gw.flatten(), gv]))
    jac = torch.stack(grads)
    empirical = jac @ jac.T
    exact = ntk_relu(x, x)
    # entries relative to sqrt(K(x,x) K(x',x')): 0.006 at this m and seed; dropping the sin term of
    # kappa_1 would be 0.16 off
    root = exact.diagonal().sqrt()
    assert float(((empirical - exact) / torch.outer(root, root)).abs().max()) < 0.02
    assert torch.allclose(exact, exact.T) and bool((torch.linalg.eigvalsh(exact) > 0).all())


@pytest.mark.parametrize("kern", [ntk_relu, lambda a, b: poly_kernel(a, b, 4)], ids=["ntk", "poly4"])
def test_row_blocks_equal_one_block(kern: Any) -> None:
    g = generator(1, "test", "rows")
    a = torch.randn(23, 4, generator=g, dtype=torch.float64)
    b = torch.randn(9, 4, generator=g, dtype=torch.float64)
    blocked = by_rows(kern, a, b, rows=5)  # 5 + 5 + 5 + 5 + 3 rows
    assert blocked.shape == (23, 9)
    assert torch.allclose(blocked, kern(a, b), rtol=1e-13, atol=0.0)


def kernel_run(**kw: Any) -> dict[str, Any]:
    sizes = {"n_mc": 4000, "n_train": 300, "n_val": 100, "n_test": 500}
    p = ADAPTER.validate_python({"learner": "kernel", "d": 4, "L": 2, "k": [3], **sizes, **kw})
    assert isinstance(p, KernelParams)
    target = make_target(p)
    summary, flops = run_kernel(p, make_data(target, p), "cpu")
    assert flops > 0
    return summary


def test_polynomial_ridge_fits_a_target_in_its_span_and_not_below() -> None:
    """At L = 2 the target is a degree-4 polynomial of x: (1 + <x,x'>/d)^4 spans it (70 monomials < 300
    samples), so the test error is the ridge's bias only; degree 2 misses the quartic part."""
    exact = kernel_run(kernel="poly", degree=4)
    low = kernel_run(kernel="poly", degree=2)
    assert exact["test_mse"] < 1e-4 and exact["ridge"] <= 1e-4
    assert exact["n_monomials"] == math.comb(4 + 4, 4)
    assert low["test_mse"] > 100 * exact["test_mse"] and low["test_mse"] > 0.01
