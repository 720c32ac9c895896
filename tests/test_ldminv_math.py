"""LD-Minv's exact identities: Lemma 1, Prop. 1, the spectral simulator, C == 1 == D-Minv, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from tasks.common import generator
from tasks.ldminv import matrix_path as MP
from tasks.ldminv import spectral as SP
from tasks.ldminv import theory as T
from tasks.ldminv.engine import eq4

F64 = torch.float64


def usv(rows: int, cols: int, s: list[float], seed: int = 0, n: int = 3) -> torch.Tensor:
    """n matrices with the given singular values (zeros allowed: rank-deficient), Haar vectors."""
    g = generator(seed, "test_ldminv")
    r = len(s)
    out = []
    for _ in range(n):
        u, _ = torch.linalg.qr(torch.randn(rows, r, generator=g, dtype=F64))
        v, _ = torch.linalg.qr(torch.randn(cols, r, generator=g, dtype=F64))
        out.append((u * torch.tensor(s, dtype=F64)) @ v.T)
    return torch.stack(out)


SHAPES = {
    "square": (12, 12, [1.0, 0.8, 0.5, 0.3, 0.2, 0.15, 0.1, 0.08, 0.06, 0.05, 0.04, 0.03]),
    "wide": (8, 14, [1.2, 0.9, 0.7, 0.4, 0.2, 0.1, 0.07, 0.05]),
    "tall": (14, 8, [1.2, 0.9, 0.7, 0.4, 0.2, 0.1, 0.07, 0.05]),
    "rank_deficient": (12, 16, [1.0, 0.6, 0.3, 0.1, 0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]),
}


def coeffs_near_one(depth: int, order: int, spread: float, seed: int = 1) -> torch.Tensor:
    g = generator(seed, "coeffs")
    return 1.0 + spread * (2 * torch.rand(depth, order, generator=g, dtype=F64) - 1)


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize(("order", "factor"), [(4, 1.0), (3, 0.6), (2, 1.0), (5, 3.0)])
def test_lemma1_order_l_convergence(shape: str, order: int, factor: float) -> None:
    """||AA+ - AX_k||_2 = e0^(L^k): relative 1e-8 while e_k > 1e-7; below that the float64 rounding of
    A X_k (about 1e-16 absolute) dominates, so the floor is checked absolutely (1e-13, about kappa * 1e-15)
    down to 0."""
    rows, cols, s = SHAPES[shape]
    a = usv(rows, cols, s)
    c0 = MP.c0_matrix(a, "spec2", factor)
    res = T.lemma1_prop1(a, MP.initial_x(a, c0, 0, order), c0, 9, order, 0)
    assert res["lemma1_layers_checked"] >= 2
    assert res["lemma1_max_rel_err"] < 1e-8
    assert res["lemma1_max_abs_err"] < 1e-13


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
def test_lemma1_with_warm_start_and_fro(shape: str) -> None:
    rows, cols, s = SHAPES[shape]
    a = usv(rows, cols, s, seed=3)
    c0 = MP.c0_matrix(a, "fro", 1.0)
    res = T.lemma1_prop1(a, MP.initial_x(a, c0, 2, 4), c0, 5, 4, 2)
    assert res["lemma1_max_rel_err"] < 1e-8 and res["lemma1_max_abs_err"] < 1e-13


def test_prop1_invariant_spaces_ldminv_rank_deficient() -> None:
    """X_k A A+ = X_k and A+ A X_k = X_k at machine precision in float64, for learned C as well."""
    rows, cols, s = SHAPES["rank_deficient"]
    a = usv(rows, cols, s, seed=5)
    pinv = torch.linalg.pinv(a)
    c0 = MP.c0_matrix(a, "spec2", 1.0)
    xs = MP.ldminv(a, MP.initial_x(a, c0, 0, 4), coeffs_near_one(6, 4, 0.1), "hyperpower", 4)
    for x in xs:
        assert float(torch.linalg.matrix_norm(x @ a @ pinv - x).max()) < 1e-12
        assert float(torch.linalg.matrix_norm(pinv @ a @ x - x).max()) < 1e-12
    # and fixed D-Minv converges to the pseudo-inverse itself (learned C stops at Prop. 4's floor)
    x = MP.dminv(a, MP.initial_x(a, c0, 0, 4), 8, 4)[-1]
    assert float(torch.linalg.matrix_norm(x - pinv).max()) < 1e-10 * float(torch.linalg.matrix_norm(pinv).max())


@pytest.mark.parametrize("shape", SHAPES, ids=list(SHAPES))
@pytest.mark.parametrize("rule", ["spec2", "fro"])
def test_spectral_simulator_equals_matrix_path(shape: str, rule: str) -> None:
    rows, cols, s = SHAPES[shape]
    a = usv(rows, cols, s, seed=7)
    sv = torch.linalg.svdvals(a)
    coeffs = coeffs_near_one(7, 4, 0.05)
    c0m, c0s = MP.c0_matrix(a, rule, 1.0), SP.c0_spectral(sv, rule, 1.0)
    assert torch.allclose(c0m, c0s, rtol=1e-13)
    lm = [MP.residual_sq(a, x) for x in MP.ldminv(a, MP.initial_x(a, c0m, 1, 4), coeffs, "hyperpower", 4)]
    ls = [
        SP.residual_sq_spectral(sv, e) for e in SP.ldminv_spectral(SP.initial_e(sv, c0s, 1, 4), coeffs, "hyperpower", 4)
    ]
    checked = 0
    for m_loss, s_loss in zip(lm, ls, strict=True):
        above = m_loss > 1e-20  # the float64 floor of ||AXA - A||_F^2
        if bool(above.any()):
            checked += 1
            assert float(((m_loss - s_loss).abs() / m_loss)[above].max()) < 1e-12
    assert checked >= 3


def test_spectral_warmup_model_matches_matrix_and_lemma2_identity() -> None:
    rows, cols, s = SHAPES["wide"]
    a = usv(rows, cols, s, seed=9)
    sv = torch.linalg.svdvals(a)
    c = torch.tensor([0.3, -0.2, 0.9], dtype=F64)
    c0 = MP.c0_matrix(a, "spec2", 1.2)
    lm = [MP.residual_sq(a, x) for x in MP.ldminv(a, MP.initial_x(a, c0, 0, 3), c, "warmup", 3)]
    e0 = SP.initial_e(sv, SP.c0_spectral(sv, "spec2", 1.2), 0, 3)
    es = SP.ldminv_spectral(e0, c, "warmup", 3)
    for m_loss, e in zip(lm, es, strict=True):
        assert torch.allclose(m_loss, SP.residual_sq_spectral(sv, e), rtol=1e-11, atol=1e-28)
    prev = e0
    for k, e in enumerate(es):  # Lemma 2: e_{k+1} = (1 - C_k) e^L + C_k e^(L+1)
        assert torch.allclose(e, (1 - c[k]) * prev**3 + c[k] * prev**4, rtol=1e-12, atol=1e-15)
        prev = e


@pytest.mark.parametrize("shape", ["square", "wide", "tall"])
@pytest.mark.parametrize("order", [2, 3, 4, 7])
def test_coefficients_one_are_dminv_bit_for_bit(shape: str, order: int) -> None:
    rows, cols, s = SHAPES[shape]
    a = usv(rows, cols, s, seed=11)
    x0 = MP.initial_x(a, MP.c0_matrix(a, "fro", 1.0), 0, order)
    ones = torch.ones(5, order, dtype=F64)
    for x, y in zip(MP.ldminv(a, x0, ones, "hyperpower", order), MP.dminv(a, x0, 5, order), strict=True):
        assert torch.equal(x, y)
    zeros = torch.zeros(5, dtype=F64)  # warm-up model with C = 0 is D-Minv of the same order
    for x, y in zip(MP.ldminv(a, x0, zeros, "warmup", order), MP.dminv(a, x0, 5, order), strict=False):
        assert torch.allclose(x, y, rtol=0, atol=1e-14)
    sv = torch.linalg.svdvals(a)
    e0 = SP.initial_e(sv, SP.c0_spectral(sv, "fro", 1.0), 0, order)
    for e, f in zip(SP.ldminv_spectral(e0, ones, "hyperpower", order), SP.dminv_spectral(e0, 5, order), strict=True):
        assert torch.equal(e, f)


def test_newton_schulz_and_third_order_closed_forms() -> None:
    rows, cols, s = SHAPES["wide"]
    a = usv(rows, cols, s, seed=13)
    x = MP.initial_x(a, MP.c0_matrix(a, "spec2", 1.0), 0, 2)
    eye = torch.eye(rows, dtype=F64)
    ax = a @ x
    assert torch.allclose(MP.dminv_layer(a, x, 2), x @ (2 * eye - ax), rtol=1e-14, atol=1e-15)
    assert torch.allclose(MP.dminv_layer(a, x, 3), x @ (3 * eye - 3 * ax + ax @ ax), rtol=1e-13, atol=1e-15)
    tall = usv(*SHAPES["tall"][:2], SHAPES["tall"][2], seed=13)
    xt = MP.initial_x(tall, MP.c0_matrix(tall, "spec2", 1.0), 0, 2)
    et = torch.eye(tall.shape[-2], dtype=F64)
    assert torch.allclose(MP.dminv_layer(tall, xt, 2), xt @ (2 * et - tall @ xt), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("path", ["spectral", "matrix"])
def test_training_gradient_matches_finite_differences(path: str) -> None:
    rows, cols, s = SHAPES["rank_deficient"]
    a = usv(rows, cols, s, seed=15, n=2)
    sv = torch.linalg.svdvals(a)

    def loss(c: torch.Tensor) -> torch.Tensor:
        if path == "matrix":
            x0 = MP.initial_x(a, MP.c0_matrix(a, "fro", 1.0), 0, 4)
            return eq4([MP.residual_sq(a, x) for x in MP.ldminv(a, x0, c, "hyperpower", 4)])
        e0 = SP.initial_e(sv, SP.c0_spectral(sv, "fro", 1.0), 0, 4)
        return eq4([SP.residual_sq_spectral(sv, e) for e in SP.ldminv_spectral(e0, c, "hyperpower", 4)])

    c = coeffs_near_one(3, 4, 0.05).requires_grad_(True)
    assert torch.autograd.gradcheck(loss, (c,), eps=1e-6, atol=1e-9, rtol=1e-6)


def test_prop4_floor_and_frobenius_slope_prediction() -> None:
    """Perturbed C (|C - 1| = delta) leaves ||e_K||_inf <= e0^(L^K) + 17/8 delta, with a floor of order delta."""
    sv = torch.linspace(0.2, 1.0, 30, dtype=F64).unsqueeze(0)
    e0 = SP.initial_e(sv, SP.c0_spectral(sv, "spec2", 1.0), 0, 4)
    delta = 1e-3
    c = 1.0 + delta * torch.where(torch.arange(24) % 3 == 0, 1.0, -1.0).to(F64).reshape(6, 4)
    e = SP.ldminv_spectral(e0, c, "hyperpower", 4)[-1]
    bound = T.prop4_bound(float(e0.abs().max()), 6, 4, delta)
    assert float(e.abs().max()) <= bound
    assert float(e.abs().max()) > 0.1 * delta  # a floor, not convergence
    assert math.isclose(T.frobenius_slope(4), -0.903, abs_tol=1e-3)
