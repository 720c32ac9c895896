"""Spec section 4 diagnostics of a (trained) net: alpha_0 and the rank of G_{L-1,T} (C6, C7), the norm of
Lemma A.3's matrix (C4), the weight-norm invariant of Lemma A.12 (C5)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Spectrum:
    alpha_gram: float  # sqrt(lambda_min(G^T G)) over all N*d columns: 0 when n_{L-1} < N*d
    alpha_thin: float  # the smallest of the min(n_{L-1}, N*d) singular values
    sigma_max: float
    rank: int  # numerical rank (singular values above sigma_max * max(shape) * eps)


def spectrum(hidden_last: torch.Tensor) -> Spectrum:
    """Singular values of G_{L-1,T} (n_{L-1} x K), computed in float64 (spec G14)."""
    g = hidden_last.double()
    sv = torch.linalg.svdvals(g).cpu()
    k, n = g.shape  # hidden_last is G^T: (K, n_{L-1})
    top = float(sv[0]) if sv.numel() else 0.0
    tol = top * max(k, n) * torch.finfo(torch.float64).eps
    # alpha is positive only for full rank: a smallest singular value under the rank tolerance is rounding
    # (LAPACK gives 1e-17 where cuSOLVER gives 0.0), so it is 0, and so are the ratios that divide by it
    thin = float(sv[-1]) if sv.numel() and float(sv[-1]) > tol else 0.0
    return Spectrum(alpha_gram=thin if n >= k else 0.0, alpha_thin=thin, sigma_max=top, rank=int((sv > tol).sum()))


def a3_norm(p: torch.Tensor, m: torch.Tensor, beta: float) -> float:
    """max_i ||I - (1/beta) diag(P_i) M_i^T M_i||_2 (block-diagonal: the max over instances). Lemma A.3
    says < 1 for P in (0, 2); the null space of M_i^T M_i (d > b) makes it >= 1."""
    h = torch.einsum("nbd,nbe->nde", m.double(), m.double())
    eye = torch.eye(m.shape[2], dtype=torch.float64, device=m.device)
    a = eye - p.double().unsqueeze(-1) * h / beta
    return float(torch.linalg.matrix_norm(a, ord=2).max())


def spectral_norms(ws: list[torch.Tensor]) -> list[float]:
    return [float(torch.linalg.matrix_norm(w.detach().double(), ord=2)) for w in ws]
