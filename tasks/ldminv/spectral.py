"""The exact spectral simulator of LD-Minv (spec section 1.3, Eq. 19-24).

Every X_k is p_k(A^T A) A^T, so the map acts on each positive singular value a on its own:
x0 = a / c0, e0 = 1 - a^2/c0, e_{k+1} = 1 - (1 - e_k) s_k(e_k), and ||A X_k A - A||_F^2 = sum_j a_j^2 e_{k,j}^2.
It costs O(n r K L) instead of O(n K L d^3), so large grids use it; the matrix path remains the
reference for rounding floors and rank-deficient float32 blow-ups, which this path cannot show.
Zero singular values (padding or rank deficiency) are carried with weight a^2 = 0.
"""

from __future__ import annotations

import torch

from tasks.ldminv.polynomial import horner_scalar, layer_vector


def c0_spectral(sv: torch.Tensor, rule: str, factor: float) -> torch.Tensor:
    """Same c0 rules as the matrix path, from the singular values (n, r)."""
    if rule == "spec2":
        base = (sv * sv).amax(dim=-1)
    elif rule == "fro":
        base = (sv * sv).sum(dim=-1)
    else:
        raise ValueError(f"unknown c0_rule {rule!r} (valid: spec2, fro)")
    return (factor * base).detach()


def fixed_layer(e: torch.Tensor, order: int) -> torch.Tensor:
    """e <- 1 - (1 - e) sum_{l<L} e^l, which equals e^L exactly (kept in the matrix path's form)."""
    s = e + 1.0
    for _ in range(order - 2):
        s = e * s + 1.0
    return 1.0 - (1.0 - e) * s


def initial_e(sv: torch.Tensor, c0: torch.Tensor, k_warm: int, order: int) -> torch.Tensor:
    e = 1.0 - sv * sv / c0[..., None]
    for _ in range(k_warm):
        e = fixed_layer(e, order)
    return e


def dminv_spectral(e0: torch.Tensor, depth: int, order: int) -> list[torch.Tensor]:
    es, e = [], e0
    for _ in range(depth):
        e = fixed_layer(e, order)
        es.append(e)
    return es


def ldminv_spectral(e0: torch.Tensor, coeffs: torch.Tensor, model: str, order: int) -> list[torch.Tensor]:
    es, e = [], e0
    for k in range(coeffs.shape[0]):
        e = 1.0 - (1.0 - e) * horner_scalar(e, layer_vector(coeffs, k, model, order))
        es.append(e)
    return es


def residual_sq_spectral(sv: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """||A X A - A||_F^2 per matrix = sum_j a_j^2 e_j^2."""
    return (sv * sv * e * e).sum(dim=-1)
