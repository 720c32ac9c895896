"""One LD-Minv layer on matrices and on singular values: the polynomial S = sum_l b_l E^l by Horner.

The matrix path and the spectral simulator share the same Horner order, so C == 1 is exactly the
coefficient-free hyper-power iteration (multiplying by 1.0 and adding 1.0*I is exact in IEEE), and
the two paths agree to rounding.

Coefficient vectors per layer (`b`, length >= 2, lowest order first):
- hyperpower (Eq. 3): b = C_{k,0..L-1}, degree L-1;
- warmup (Eq. 16): b = (1, ..., 1, C_k), degree L (the extra learnable term C_k E^L).
"""

from __future__ import annotations

import torch


def horner_matrix(e: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum_l b[l] E^l for a batch of square E (..., q, q); b is a 1-D tensor of length >= 2."""
    n = b.shape[0]
    eye = torch.eye(e.shape[-1], dtype=e.dtype, device=e.device)
    s = b[n - 1] * e + b[n - 2] * eye
    for idx in range(n - 3, -1, -1):
        s = e @ s + b[idx] * eye
    return s


def hyperpower_matrix(e: torch.Tensor, order: int) -> torch.Tensor:
    """Fixed D-Minv's sum_{l<order} E^l with no coefficients at all (Eq. 2), same Horner order."""
    eye = torch.eye(e.shape[-1], dtype=e.dtype, device=e.device)
    s = e + eye
    for _ in range(order - 2):
        s = e @ s + eye
    return s


def horner_scalar(e: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same polynomial evaluated elementwise on a tensor of residual singular values e."""
    n = b.shape[0]
    s = b[n - 1] * e + b[n - 2]
    for idx in range(n - 3, -1, -1):
        s = e * s + b[idx]
    return s


def layer_vector(coeffs: torch.Tensor, k: int, model: str, order: int) -> torch.Tensor:
    """Layer k's polynomial coefficients b from the learnable tensor (hyperpower: (K, L); warmup: (K,))."""
    if model == "hyperpower":
        return coeffs[k]
    ones = torch.ones(order, dtype=coeffs.dtype, device=coeffs.device)
    return torch.cat([ones, coeffs[k : k + 1]])
