"""deep_linear: closed forms against independent computations (finite differences, golden section,
a plain steepest-descent loop), the exact decrease of eq. (3.4), monotone error, Thm 3.2, L4 optimum."""

from __future__ import annotations

import math

import numpy as np
import pydantic
import pytest
import torch

from tasks.base import RunContext
from tasks.deep_linear import theory
from tasks.deep_linear.bcgd import bcgd, layer_gradient
from tasks.deep_linear.bcsgd import BCSGDStats, bcsgd
from tasks.deep_linear.data import make_problem
from tasks.deep_linear.flops import FlopCounter
from tasks.deep_linear.gd import gd
from tasks.deep_linear.init import end_to_end, init_weights
from tasks.deep_linear.objective import l4_loss_sum
from tasks.deep_linear.sweep import gauss_seidel_slots
from tasks.deep_linear.task import DeepLinearTask

TASK = DeepLinearTask()
ADAPTER = pydantic.TypeAdapter(TASK.Params)


def params(**kw):
    return ADAPTER.validate_python(kw)


def setup(**kw):
    p = params(**kw)
    prob = make_problem(p)
    ws = init_weights(
        p.init, p.layer_widths(), p.init_seed_eff(), torch.float64, balanced_std=p.balanced_std, random_std=p.random_std
    )
    return p, prob, ws


def data_loss(ws, x, y, power=2):
    """(1/power) sum |W_L..W_1 X - Y|^power in data form (independent of the covariance code)."""
    r = end_to_end(ws) @ x - y
    return float((r.abs() ** power).sum()) / power


def fd_grad(ws, i, x, y, power=2, h=1e-6):
    """Entrywise central finite differences of data_loss with respect to W_i."""
    w = ws[i - 1]
    out = torch.zeros_like(w)
    for a in range(w.shape[0]):
        for b in range(w.shape[1]):
            e = torch.zeros_like(w)
            e[a, b] = h
            plus = [*ws[: i - 1], w + e, *ws[i:]]
            minus = [*ws[: i - 1], w - e, *ws[i:]]
            out[a, b] = (data_loss(plus, x, y, power) - data_loss(minus, x, y, power)) / (2 * h)
    return out


TINY = dict(algo="bcgd", d_in=4, d_out=3, m=9, L=3, widths=[5, 2], init="random", seed=5)


@pytest.mark.parametrize("order", ["desc", "asc"])
def test_bcgd_gradient_matches_finite_differences(order):
    p, prob, ws = setup(**TINY, order=order)
    slots = gauss_seidel_slots(ws, order, FlopCounter())
    for _ in range(p.L):  # weights untouched: every slot sees the same point
        slot = next(slots)
        r = slot.m @ prob.sxx - prob.syx
        g, *_ = layer_gradient(slot, r, prob.sxx, FlopCounter())
        fd = fd_grad(ws, slot.i, prob.x, prob.y)
        assert torch.allclose(g, fd, rtol=1e-6, atol=1e-7 * float(fd.abs().max())), slot.i


def test_gd_gradients_match_finite_differences():
    p, prob, ws = setup(**{**TINY, "algo": "gd", "lr": 1.0})
    old = [w.clone() for w in ws]
    next(gd(prob, ws, 1.0, 1, FlopCounter()))  # ws <- ws - 1.0 * G
    for i in range(1, p.L + 1):
        fd = fd_grad(old, i, prob.x, prob.y)
        assert torch.allclose(old[i - 1] - ws[i - 1], fd, rtol=1e-6, atol=1e-7 * float(fd.abs().max()))


def test_l4_gradient_matches_finite_differences():
    p, prob, ws = setup(**TINY, loss="l4", lr_rule="const", lr=1.0, order="asc")
    old = [w.clone() for w in ws]
    gen = bcgd(prob, ws, p, FlopCounter())
    u = next(gen)  # ascending: layer 1 first
    assert u.layer == 1
    fd = fd_grad(old, 1, prob.x, prob.y, power=4)
    assert torch.allclose(old[0] - ws[0], fd, rtol=1e-6, atol=1e-7 * float(fd.abs().max()))


def test_bcsgd_step_is_a_single_sample_gradient():
    p = params(**{**TINY, "algo": "bcsgd", "eta_bar": 0.5, "widths": [6, 5]})
    prob = make_problem(p)
    ws = init_weights(p.init, p.layer_widths(), p.init_seed_eff(), torch.float64)
    old = [w.clone() for w in ws]
    u = next(bcsgd(prob, ws, p, FlopCounter(), BCSGDStats()))
    step = (old[u.layer - 1] - ws[u.layer - 1]) / u.lr
    matches = []
    for k in range(prob.m):
        fd = fd_grad(old, u.layer, prob.x[:, k : k + 1], prob.y[:, k : k + 1])
        matches.append(float((step - fd).abs().max()) / float(fd.abs().max() + 1e-300))
    assert min(matches) < 1e-6


def golden_min(phi, a, b, tol=1e-10):
    """Golden-section search for the minimiser of a unimodal phi on [a, b]."""
    inv = (math.sqrt(5) - 1) / 2
    c, d = b - inv * (b - a), a + inv * (b - a)
    fc, fd = phi(c), phi(d)
    while b - a > tol * max(1.0, abs(a) + abs(b)) / 2:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - inv * (b - a)
            fc = phi(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv * (b - a)
            fd = phi(d)
    return (a + b) / 2


@pytest.mark.parametrize(
    "seed,order,init,width",
    [
        (0, "desc", "orth_identity", None),
        (1, "asc", "random", 9),
        (2, "desc", "balanced", 12),
        (3, "asc", "identity", None),
    ],
)
def test_optimal_step_matches_golden_section(seed, order, init, width):
    kw = dict(algo="bcgd", d_in=8, d_out=5, m=30, L=4, seed=seed, order=order, init=init)
    if width:
        kw["width"] = width
    p, prob, ws = setup(**kw)
    slots = gauss_seidel_slots(ws, order, FlopCounter())
    for _ in range(p.L):
        slot = next(slots)
        r = slot.m @ prob.sxx - prob.syx
        g, ag, d, q, g2 = layer_gradient(slot, r, prob.sxx, FlopCounter())
        eta = g2 / q
        # convention-free form <WX - Y, AGC> / ||AGC||^2 (spec G1) is the same number
        assert eta == pytest.approx(float((r * d).sum()) / q, rel=1e-10)

        def phi(t, i=slot.i, g=g):
            return data_loss([*ws[: i - 1], ws[i - 1] - t * g, *ws[i:]], prob.x, prob.y)

        hi = 1e-8
        while phi(2 * hi) < phi(hi):
            hi *= 2
        best = golden_min(phi, 0.0, 4 * hi)
        assert eta == pytest.approx(best, rel=1e-5)
        for f in (0.9, 1.1):  # spec: perturbing eta by 10 % never lowers the loss
            assert phi(f * eta) >= phi(eta)


@pytest.mark.parametrize("order", ["desc", "asc"])
def test_exact_decrease_and_monotone_error(order):
    p, prob, ws = setup(algo="bcgd", data="gauss_bigcond", d_in=10, d_out=4, m=40, L=5, width=12, order=order)
    gen = bcgd(prob, ws, p, FlopCounter())
    prev_ws = [w.clone() for w in ws]
    prev = data_loss(prev_ws, prob.x, prob.y)
    for _ in range(60):
        u = next(gen)
        now = data_loss(ws, prob.x, prob.y)
        dw2 = float(((prev_ws[u.layer - 1] - ws[u.layer - 1]) ** 2).sum())
        # the un-halved loss drops by ||G||^4/||AGC||^2 = eta ||G||^2 = ||dW||^2 / eta (spec 1.6a);
        # data_loss is the halved one
        if u.lr > 0 and prev - now > 1e-9 * prev:
            assert 2 * (prev - now) == pytest.approx(dw2 / u.lr, rel=1e-6)
        assert now <= prev * (1 + 1e-12)
        prev, prev_ws = now, [w.clone() for w in ws]


@pytest.mark.parametrize(
    "kw",
    [
        dict(L=10, order="desc"),
        dict(L=10, order="asc", init="balanced"),
        dict(L=6, init="random", order="asc"),
        dict(L=4, data="gauss_bigcond", width=40),
        dict(L=3, init="identity", d_in=8, d_out=20, width=24),
    ],
)
def test_error_never_rises_under_bcgd(kw):
    base = dict(algo="bcgd", d_in=16, d_out=4, m=60, n_iters=200)
    res = TASK.run(params(**{**base, **kw}), RunContext())
    assert res.status == "ok" and res.summary["n_increase"] == 0
    err = np.array(res.curve["err"])
    assert np.all(err[1:] <= err[:-1] * (1 + 1e-10) + 1e-20 * err[0])


def test_grad_scale_2_leaves_the_loss_unchanged():
    """Spec G1: feeding the un-halved gradient into eq. (3.4) doubles the exact step; the loss is
    quadratic along the line, so it does not change at all."""
    res = TASK.run(params(algo="bcgd", d_in=12, d_out=3, m=50, L=3, n_iters=30, grad_scale=2), RunContext())
    err = np.array(res.curve["err"])
    assert np.max(np.abs(err - err[0])) < 1e-10 * err[0]


def test_depth_one_bcgd_is_steepest_descent_with_exact_line_search():
    p, prob, ws = setup(algo="bcgd", d_in=12, d_out=4, m=50, L=1, n_iters=40)
    res = TASK.run(p, RunContext())
    x, y = prob.x.numpy(), prob.y.numpy()
    w = ws[0].numpy().copy()
    w_star = y @ np.linalg.pinv(x)
    ref = []
    for _ in range(40):
        g = (w @ x - y) @ x.T
        alpha = np.sum(g * g) / np.sum((g @ x) ** 2)
        w = w - alpha * g
        ref.append(np.sum(((w - w_star) @ x) ** 2) / x.shape[1])
    ours = np.array(res.curve["err"][1:])
    mask = np.array(ref) > 1e-12
    assert np.allclose(ours[mask], np.array(ref)[mask], rtol=1e-7)


@pytest.mark.parametrize("order", ["desc", "asc"])
@pytest.mark.parametrize("rule", [("opt", None), ("thm32", 0.5), ("thm32", 1.0), ("thm32", 1.5), ("thm32", 1.9)])
def test_thm32_per_update_contraction_holds(order, rule):
    lr_rule, eta_bar = rule
    kw = dict(
        algo="bcgd", d_in=16, d_out=4, m=60, L=6, width=16, order=order, n_iters=90, lr_rule=lr_rule, check_thm32=True
    )
    if eta_bar is not None:
        kw["eta_bar"] = eta_bar
    res = TASK.run(params(**kw), RunContext())
    assert res.summary["thm32_violations"] == 0
    assert res.summary["thm32_max_ratio"] <= 1 + 1e-8


@pytest.mark.parametrize("algo", ["bcgd", "gd"])
def test_thm32_fields_are_null_not_a_sentinel_where_not_checked(algo):
    """Without check_thm32 nothing was counted: null (issue 45; version 3 stored -1, which a mean or max
    over runs read as a count), and NaN for the ratio."""
    extra = {"lr": 0.01} if algo == "gd" else {}
    res = TASK.run(params(algo=algo, d_in=8, d_out=2, m=30, L=3, width=8, n_iters=20, **extra), RunContext())
    assert res.summary["thm32_violations"] is None
    assert math.isnan(res.summary["thm32_max_ratio"])


def test_l4_optimum_and_run():
    p = params(algo="bcgd", loss="l4", d_in=10, d_out=2, m=40, L=3, n_iters=150)
    res = TASK.run(p, RunContext())
    assert res.summary["l4_grad_rel"] < 1e-10
    prob = make_problem(p)
    from tasks.deep_linear.objective import L4Objective

    obj = L4Objective(prob)
    f_star = l4_loss_sum(obj.w_star, prob.x, prob.y)
    assert f_star < l4_loss_sum(prob.w_ls, prob.x, prob.y)  # spec G7: the L4 optimum is not Y X^+
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1e-5):
        for _ in range(5):
            pert = obj.w_star + scale * torch.randn(obj.w_star.shape, generator=g, dtype=torch.float64)
            assert l4_loss_sum(pert, prob.x, prob.y) >= f_star * (1 - 1e-14)
    err = np.array(res.curve["err"])
    assert err.min() > -1e-10 and err[-1] < 1e-2 * err[0]


def test_bcsgd_floor_and_realisable_limit():
    """Thm 3.6: BCSGD stalls at a floor that grows with eta_bar and lies between the theorem's
    bounds (for the uniform constants seen along the run); with Y = T X (L(W*) = 0) there is none."""
    base = dict(algo="bcsgd", d_in=8, d_out=2, m=40, L=2, n_iters=2000, log_every=100, tail_frac=0.5)
    small = TASK.run(params(**base, eta_bar=0.25), RunContext()).summary
    big = TASK.run(params(**base, eta_bar=1.0), RunContext()).summary
    clean = TASK.run(params(**base, eta_bar=1.0, data="gauss_teacher"), RunContext()).summary
    assert clean["err_tail"] < 1e-4 * big["err_tail"]
    assert small["err_tail"] > 1e-3 * small["err_0"]
    assert small["bcsgd_floor_low"] <= small["err_tail"] <= small["bcsgd_floor_upp"]
    assert big["err_tail"] > 1.5 * small["err_tail"]


def test_theory_constants_match_spec_table():
    table = {
        2: (0.149219, 0.107764, 0.548062),
        5: (0.045934, 0.084076, 0.479284),
        100: (0.002013, 0.074035, 0.450632),
        400: (0.000501, 0.073690, 0.449653),
    }
    assert theory.r_l(1) == 1.0 and theory.h_l(1) == pytest.approx(0.25)
    for depth, (r, h, f) in table.items():
        assert theory.r_l(depth) == pytest.approx(r, abs=2e-6)
        assert theory.h_l(depth) == pytest.approx(h, abs=2e-6)
        assert theory.lemma31_factor(depth) == pytest.approx(f, abs=2e-6)
    # spec: sigma~ = 2.28, kappa = 2.65 gives c = 14.2 at L = 1 (radius 0.16)
    assert theory.thm33_c(2.65, 2.28, 1) == pytest.approx(14.2, abs=0.1)
