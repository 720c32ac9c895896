"""D-Minv and LD-Minv on batches of matrices (the paper's computation, Eq. 2-3 and Eq. 16).

A is (batch, d2, d1) in the paper's convention and X approximates its pseudo-inverse, (batch, d1, d2).
The residual E is put on the smaller side (spec section 5): E = I - A X (d2 x d2) and
X <- X S(E) when d2 <= d1, else E' = I - X A (d1 x d1) and X <- S(E') X; the two are the same map
because X (I - A X)^l = (I - X A)^l X.
"""

from __future__ import annotations

import torch

from tasks.ldminv.polynomial import horner_matrix, hyperpower_matrix, layer_vector


def c0_matrix(a: torch.Tensor, rule: str, factor: float) -> torch.Tensor:
    """Per-matrix scale c0 of X0 = A^T / c0 (detached: c0 is computed, never learned).

    spec2: factor * ||A||_2^2 (exact, from the singular values); fro: factor * ||A||_F^2 (a cheap
    upper bound). Lemma 1 needs c0 > ||A||_2^2 / 2.
    """
    with torch.no_grad():
        if rule == "spec2":
            base = torch.linalg.matrix_norm(a, ord=2) ** 2
        elif rule == "fro":
            base = (a * a).sum(dim=(-2, -1))
        else:
            raise ValueError(f"unknown c0_rule {rule!r} (valid: spec2, fro)")
    return (factor * base).detach()


def _step(a: torch.Tensor, x: torch.Tensor, poly: object) -> torch.Tensor:
    d2, d1 = a.shape[-2], a.shape[-1]
    if d2 <= d1:
        e = torch.eye(d2, dtype=a.dtype, device=a.device) - a @ x
        return x @ poly(e)  # type: ignore[operator]  # poly returns a tensor for a tensor argument
    e = torch.eye(d1, dtype=a.dtype, device=a.device) - x @ a
    return poly(e) @ x  # type: ignore[operator]  # as above


def dminv_layer(a: torch.Tensor, x: torch.Tensor, order: int) -> torch.Tensor:
    """One fixed hyper-power layer of order L (L = 2: Newton-Schulz X(2I - AX))."""
    return _step(a, x, lambda e: hyperpower_matrix(e, order))


def ldminv_layer(a: torch.Tensor, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One learnable layer X <- X sum_l b_l E^l."""
    return _step(a, x, lambda e: horner_matrix(e, b))


def initial_x(a: torch.Tensor, c0: torch.Tensor, k_warm: int, order: int) -> torch.Tensor:
    """X0 = A^T / c0, then k_warm fixed D-Minv layers (Algorithm 1's warm start, option ii)."""
    x = a.transpose(-2, -1) / c0[..., None, None]
    for _ in range(k_warm):
        x = dminv_layer(a, x, order)
    return x


def dminv(a: torch.Tensor, x0: torch.Tensor, depth: int, order: int) -> list[torch.Tensor]:
    """Fixed D-Minv: X_1..X_K (Eq. 2), no coefficients anywhere."""
    xs, x = [], x0
    for _ in range(depth):
        x = dminv_layer(a, x, order)
        xs.append(x)
    return xs


def ldminv(a: torch.Tensor, x0: torch.Tensor, coeffs: torch.Tensor, model: str, order: int) -> list[torch.Tensor]:
    """LD-Minv: X_1..X_K with coefficients (hyperpower: (K, L); warmup: (K,))."""
    xs, x = [], x0
    for k in range(coeffs.shape[0]):
        x = ldminv_layer(a, x, layer_vector(coeffs, k, model, order))
        xs.append(x)
    return xs


def residual_sq(a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """||A X A - A||_F^2 per matrix (the paper's loss term, Eq. 4)."""
    r = a @ x @ a - a
    return (r * r).sum(dim=(-2, -1))
