"""D-SVD (Sec. 3.1, Eq. 7-12): Cayley steps on the Stiefel manifold with LD-Minv inside.

f(U, V) = 1/2 ||Dc(U^T M V)||_F^2 - <M, U V^T>, with Dc zeroing the diagonal. A layer updates U with
V fixed, then V with the new U (the V step is the U step on M^T with the roles swapped):
  G = M V (Dc(V^T M^T U) - I),  P = G U^T - U G^T (skew),  U(t) = (I + tP/2)^{-1} (I - tP/2) U,
t = rule(f'(0), f''(0), eps = 2/||P||_2) + t_offset (learnable, per layer), and the inverse is
LD-Minv(I + tP/2) with c0 = 1 + (t ||P||_2 / 2)^2 (I + tP/2 is normal with ||.||^2 = 1 + t^2 ||P||^2/4).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasks.ldminv import matrix_path as MP


def offdiag(x: torch.Tensor) -> torch.Tensor:
    return x - torch.diag_embed(torch.diagonal(x, dim1=-2, dim2=-1))


def objective(m: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """f(U, V) per sample (Eq. 7)."""
    lam = u.transpose(-2, -1) @ m @ v
    off = offdiag(lam)
    return 0.5 * (off * off).sum(dim=(-2, -1)) - torch.diagonal(lam, dim1=-2, dim2=-1).sum(-1)


def _inner(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sum(dim=(-2, -1))


def direction(m: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """P = G U^T - U G^T with G = M V (Dc(V^T M^T U) - I) (m x m, skew)."""
    mv = m @ v
    lam_t = v.transpose(-2, -1) @ m.transpose(-2, -1) @ u
    eye = torch.eye(u.shape[-1], dtype=u.dtype, device=u.device)
    g = mv @ (offdiag(lam_t) - eye)
    return g @ u.transpose(-2, -1) - u @ g.transpose(-2, -1)


def taylor(m: torch.Tensor, u: torch.Tensor, v: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """f'(0) and f''(0) of t -> f(U(t), V) along the Cayley curve (Eq. 11)."""
    mv = m @ v
    ut = u.transpose(-2, -1)
    off = offdiag(ut @ mv)
    pmv = p @ mv
    d1 = offdiag(ut @ pmv)
    pu = p @ u
    ppu = p @ pu
    f1 = _inner(off, d1) + _inner(mv, pu)
    f2 = (d1 * d1).sum(dim=(-2, -1)) + _inner(off, offdiag(ut @ (p @ pmv))) - _inner(mv, ppu)
    return f1, f2


def step_size(f1: torch.Tensor, f2: torch.Tensor, eps: torch.Tensor, rule: str) -> torch.Tensor:
    """literal: min{eps, -f'/f''} (Eq. 10/12, may go uphill when f'' <= 0); box: the quadratic model's
    minimiser on [0, eps] (the spec's reading of the missing Eq. 8)."""
    if rule == "literal":
        return torch.minimum(eps, -f1 / f2)
    safe = torch.where(f2 > 0, f2, torch.ones_like(f2))
    interior = torch.clamp(-f1 / safe, min=torch.zeros_like(eps), max=eps)
    edge = torch.where(f1 < 0, eps, torch.zeros_like(eps))
    return torch.where(f2 > 0, interior, edge)


@dataclass
class Inverse:
    kind: str  # ldminv | exact
    order: int


def cayley(
    u: torch.Tensor, p: torch.Tensor, t: torch.Tensor, pnorm: torch.Tensor, coeffs: torch.Tensor | None, inv: Inverse
) -> torch.Tensor:
    """U(t) = Inv(I + tP/2) (I - tP/2) U; the inverse by LD-Minv (coeffs (K_inv, L_inv)) or exactly."""
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    half = (t / 2)[..., None, None] * p
    rhs = (eye - half) @ u
    a = eye + half
    if inv.kind == "exact":
        return torch.linalg.solve(a, rhs)
    assert coeffs is not None
    c0 = (1.0 + (t.detach() * pnorm / 2) ** 2).detach()
    x0 = a.transpose(-2, -1) / c0[..., None, None]
    x = MP.ldminv(a, x0, coeffs, "hyperpower", inv.order)[-1]
    return x @ rhs


@dataclass
class LayerData:
    """What a U (or V) step computed, for inner LD-Minv training and diagnostics."""

    a: torch.Tensor  # I + tP/2, detached
    c0: torch.Tensor
    t_rule: torch.Tensor  # the rule's step before the offset


def half_step(
    m: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
    offset: torch.Tensor,
    coeffs: torch.Tensor | None,
    inv: Inverse,
    rule: str,
) -> tuple[torch.Tensor, LayerData]:
    p = direction(m, u, v)
    # A non-finite P (U blown up by wild inner coefficients) must give a NaN loss, reported as diverged,
    # not an SVD error: the norm is taken of P with its non-finite entries zeroed, the rest stays NaN.
    pnorm = torch.linalg.matrix_norm(torch.nan_to_num(p.detach(), nan=0.0, posinf=0.0, neginf=0.0), ord=2)
    eps = 2.0 / pnorm.clamp_min(1e-300)
    f1, f2 = taylor(m, u, v, p)
    t_rule = step_size(f1, f2, eps, rule)
    t = t_rule + offset
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    data = LayerData(
        (eye + (t.detach() / 2)[..., None, None] * p.detach()), (1.0 + (t.detach() * pnorm / 2) ** 2), t_rule.detach()
    )
    return cayley(u, p, t, pnorm, coeffs, inv), data


def stiefel_init(n: int, rows: int, cols: int, g: torch.Generator) -> torch.Tensor:
    """(n, rows, cols) orthonormal columns: QR of a Gaussian with the sign fix."""
    q, r = torch.linalg.qr(torch.randn(n, rows, cols, generator=g, dtype=torch.float64))
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)


def svd_errors(m: torch.Tensor, u: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sample: ||Sort(Diag(U^T M V)) - sigma(M)||^2 (the paper's SVD MSE, a sum over r entries),
    and ||U^T U - I||_F + ||V^T V - I||_F (orthogonality drift)."""
    r = u.shape[-1]
    d = torch.diagonal(u.transpose(-2, -1) @ m @ v, dim1=-2, dim2=-1)
    s = torch.linalg.svdvals(m.to(torch.float64))[..., :r].to(d.dtype)
    mse = ((torch.sort(d, dim=-1, descending=True).values - s) ** 2).sum(-1)
    eye = torch.eye(r, dtype=u.dtype, device=u.device)
    orth = torch.linalg.matrix_norm(u.transpose(-2, -1) @ u - eye) + torch.linalg.matrix_norm(
        v.transpose(-2, -1) @ v - eye
    )
    return mse, orth
