"""D-SVD: the Taylor derivatives (Eq. 11), the Cayley step, the step rules, and the offset gradient."""

from __future__ import annotations

import torch

from tasks.common import generator
from tasks.ldminv import dsvd as D

F64 = torch.float64


def problem(m: int = 6, n: int = 9, batch: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = generator(seed, "test_dsvd")
    mat = torch.randn(batch, m, n, generator=g, dtype=F64) / 3
    r = min(m, n)
    return mat, D.stiefel_init(batch, m, r, g), D.stiefel_init(batch, n, r, g)


def exact_curve(u: torch.Tensor, p: torch.Tensor, t: float) -> torch.Tensor:
    tt = torch.full(u.shape[:1], t, dtype=F64)
    return D.cayley(u, p, tt, torch.ones_like(tt), None, D.Inverse("exact", 4))


def test_taylor_derivatives_match_finite_differences() -> None:
    m, u, v = problem()
    p = D.direction(m, u, v)
    f1, f2 = D.taylor(m, u, v, p)
    h = 1e-4
    fp, f0, fm = (D.objective(m, exact_curve(u, p, t), v) for t in (h, 0.0, -h))
    assert torch.allclose(f1, (fp - fm) / (2 * h), rtol=1e-6, atol=1e-8)
    assert torch.allclose(f2, (fp - 2 * f0 + fm) / h**2, rtol=1e-4, atol=1e-5)
    assert torch.allclose(p, -p.transpose(-2, -1))


def test_cayley_stays_on_stiefel_and_ldminv_inverse_is_exact() -> None:
    m, u, v = problem(seed=1)
    p = D.direction(m, u, v)
    pnorm = torch.linalg.matrix_norm(p, ord=2)
    t = 2.0 / pnorm  # the largest step the rule allows
    exact = D.cayley(u, p, t, pnorm, None, D.Inverse("exact", 4))
    ones = torch.ones(6, 4, dtype=F64)
    learned = D.cayley(u, p, t, pnorm, ones, D.Inverse("ldminv", 4))
    eye = torch.eye(u.shape[-1], dtype=F64)
    assert float((exact.transpose(-2, -1) @ exact - eye).abs().max()) < 1e-13
    # kappa(I + tP/2) <= sqrt(2) with c0 = 1 + (t||P||/2)^2: e0 <= 1/2, and 0.5^(4^6) is far below eps
    assert float((learned - exact).abs().max()) < 1e-12


def test_step_rules() -> None:
    eps = torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=F64)
    f1 = torch.tensor([-1.0, -1.0, 1.0, 1.0], dtype=F64)
    f2 = torch.tensor([4.0, -2.0, -2.0, 4.0], dtype=F64)
    box = D.step_size(f1, f2, eps, "box")
    assert box.tolist() == [0.25, 1.0, 0.0, 0.0]
    literal = D.step_size(f1, f2, eps, "literal")
    assert literal.tolist() == [0.25, -0.5, 0.5, -0.25]  # negative steps go uphill (spec 1.6)


def test_untrained_dsvd_descends_to_the_svd() -> None:
    m, u, v = problem(m=4, n=6, batch=2, seed=2)
    sigma = torch.linalg.svdvals(m).sum(-1)
    offs = torch.zeros(2, dtype=F64)
    inv = D.Inverse("ldminv", 4)
    ones = torch.ones(6, 4, dtype=F64)
    gaps = []
    for _ in range(150):
        u, _ = D.half_step(m, u, v, offs, ones, inv, "box")
        v, _ = D.half_step(m.transpose(-2, -1), v, u, offs, ones, inv, "box")
        gaps.append(float((D.objective(m, u, v) + sigma).max()))
    assert gaps[-1] < 1e-3 * gaps[0] and gaps[-1] >= -1e-10  # f >= -sum sigma (von Neumann)
    mse, orth = D.svd_errors(m, u, v)
    assert float(mse.max()) < 1e-4 and float(orth.max()) < 1e-10


def test_offset_gradient_matches_finite_differences() -> None:
    m, u0, v0 = problem(m=4, n=5, batch=2, seed=3)
    inv = D.Inverse("ldminv", 4)
    ones = torch.ones(4, 4, dtype=F64)

    def loss(off: torch.Tensor) -> torch.Tensor:
        u, v, total = u0, v0, torch.zeros((), dtype=F64)
        for k in range(2):
            u, _ = D.half_step(m, u, v, off[k, 0], ones, inv, "box")
            v, _ = D.half_step(m.transpose(-2, -1), v, u, off[k, 1], ones, inv, "box")
            total = total + D.objective(m, u, v).mean()
        return total / 2

    off = torch.full((2, 2), 0.01, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(loss, (off,), eps=1e-6, atol=1e-7, rtol=1e-5)
