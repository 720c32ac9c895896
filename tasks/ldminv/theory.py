"""Theory checks and predictions recorded per run (spec section 4), so analysis needs no task code."""

from __future__ import annotations

import math

import torch

from tasks.ldminv import matrix_path as MP

LEMMA1_REL_ABOVE = 1e-7  # relative agreement is checked while e_k is above this (rounding is ~1e-16 absolute)


def lemma1_prop1(
    a: torch.Tensor, x0: torch.Tensor, c0: torch.Tensor, depth: int, order: int, k_warm: int
) -> dict[str, float]:
    """Fixed D-Minv against Lemma 1 (||AA+ - AX_k||_2 = e0^(L^k)) and Prop. 1 (X_k A A+ = X_k = A+ A X_k).

    A+ comes from a float64 SVD with the usual rank cut-off; e0 = max_j |1 - s_j^2/c0| over the positive
    singular values. With a warm start the k-th layer's prediction is e0^(L^(k_warm + k)).
    """
    a64 = a.to(torch.float64)
    pinv = torch.linalg.pinv(a64)
    sv = torch.linalg.svdvals(a64)
    tol = sv[..., :1] * max(a.shape[-2:]) * torch.finfo(torch.float64).eps
    c64 = c0.to(torch.float64)
    e0 = torch.where(sv > tol, (1.0 - sv * sv / c64[..., None]).abs(), torch.zeros_like(sv)).amax(dim=-1)
    proj = a64 @ pinv
    rel, absolute, prop1, checked = 0.0, 0.0, 0.0, 0
    for k, x in enumerate(MP.dminv(a, x0, depth, order), start=1):
        x64 = x.to(torch.float64)
        e = torch.linalg.matrix_norm(proj - a64 @ x64, ord=2)
        pred = e0 ** (float(order) ** (k_warm + k))
        absolute = max(absolute, float((e - pred).abs().max()))
        above = pred > LEMMA1_REL_ABOVE
        if bool(above.any()):
            rel = max(rel, float(((e - pred).abs() / pred)[above].max()))
            checked = k
        r1 = torch.linalg.matrix_norm(x64 @ proj - x64)
        r2 = torch.linalg.matrix_norm(pinv @ a64 @ x64 - x64)
        prop1 = max(prop1, float(torch.maximum(r1, r2).max()))
    return {
        "lemma1_max_rel_err": rel,
        "lemma1_max_abs_err": absolute,
        "lemma1_layers_checked": checked,
        "prop1_max_residual": prop1,
    }


def frobenius_slope(order: int) -> float:
    """Spec 4.1b: log10 TestLoss falls by 1.5 log10 L per layer on square Gaussian data."""
    return -1.5 * math.log10(order)


def prop4_bound(e0_max: float, depth: int, order: int, delta: float) -> float:
    """Prop. 4: ||e_K||_inf <= e0^(L^K) + (17/8) delta."""
    power = float(order) ** depth
    lead = 0.0 if e0_max <= 0.0 or power * math.log(e0_max) < -700 else e0_max**power
    return lead + 17.0 / 8.0 * delta


def empirical_order(es: list[torch.Tensor], weight: torch.Tensor) -> float:
    """Median over matrices and layers 0..K-2 of log e_{k+1} / log e_k for the slowest singular value
    (Lemma 2's effective order; the last layer is excluded because it may fit exactly)."""
    pos = weight > 0
    ratios = []
    for k in range(len(es) - 2):
        ek = torch.where(pos, es[k].abs(), torch.zeros_like(es[k])).amax(dim=-1)
        ek1 = torch.where(pos, es[k + 1].abs(), torch.zeros_like(es[k + 1])).amax(dim=-1)
        ok = (ek < 0.9) & (ek > 0) & (ek1 > 1e-280)
        if bool(ok.any()):
            ratios.append((ek1[ok].log() / ek[ok].log()).to(torch.float64))
    if not ratios:
        return math.nan
    return float(torch.cat(ratios).median())
