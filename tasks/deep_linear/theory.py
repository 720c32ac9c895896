"""The theory's rates and constants (Thms 3.2-3.4, Lemma 3.1, Thm 3.6), as plain functions.

Kept separate from the learners so that every run can store the predictions for its config in its
summary, and analysis never needs the task code.
"""

from __future__ import annotations

import math

import torch


def r_l(depth: int) -> float:
    """R_L = 2 / ((5L-3) + sqrt((5L-3)^2 - 4L)); R_1 = 1."""
    a = 5.0 * depth - 3.0
    return 2.0 / (a + math.sqrt(a * a - 4.0 * depth))


def h_l(depth: int) -> float:
    """h(L) = L R_L (1-R_L)^(2L-2) / (1+R_L)^(3L-1), with 0^0 = 1 at L = 1."""
    r = r_l(depth)
    return depth * r * (1.0 - r) ** (2 * depth - 2) / (1.0 + r) ** (3 * depth - 1)


def lemma31_factor(depth: int) -> float:
    """((1-R_L)/(1+R_L))^(2(L-1)), which tends to exp(-4/5) as L grows."""
    r = r_l(depth)
    return ((1.0 - r) / (1.0 + r)) ** (2 * (depth - 1))


def rate_sweep_thm33(kappa_x: float, depth: int, eta_bar: float = 1.0) -> float:
    """Per-sweep contraction gamma^(2L), gamma = 1 - eta_bar / (5 kappa^2(X)) (Thm 3.3)."""
    return (1.0 - eta_bar / (5.0 * kappa_x**2)) ** (2 * depth)


def rate_sweep_lemma31(kappa_x: float, depth: int, eta_bar: float = 1.0) -> float:
    """Per-sweep (gamma_L)^(2L) with Lemma 3.1's sharper gamma_L = 1 - (eta_bar/kappa^2) ((1-R)/(1+R))^(2(L-1))."""
    return (1.0 - eta_bar / kappa_x**2 * lemma31_factor(depth)) ** (2 * depth)


def thm33_c(kappa_x: float, sigma_tilde: float, depth: int) -> float:
    """c of eq. (3.6): the admissible distance to the optimum is sigma_tilde / c."""
    h = h_l(depth)
    k2 = kappa_x**2
    return 1.0 + k2 * (1.0 + math.sqrt(1.0 + 4.0 * h * sigma_tilde / k2)) / (2.0 * h * sigma_tilde)


def thm34_depth_rhs(sigma_min_wx: float, c: float, dist_x: float, kappa_x: float, eta_bar: float = 1.0) -> float:
    """Right side of Thm 3.4's depth condition
    L >= log(sigma_min(W*X) / (c ||(W0-W*)X||)) / log(1 - eta_bar/kappa^2)."""
    if dist_x <= 0:
        return 0.0
    return math.log(sigma_min_wx / (c * dist_x)) / math.log(1.0 - eta_bar / kappa_x**2)


def thm32_gamma(kappa2_a: float, kappa2_c: float, eta_bar: float = 1.0) -> float:
    """Per-update factor gamma = max{1 - eta_bar/(kappa_r^2(A) kappa_rx^2(C)), eta_bar - 1} (Thm 3.2)."""
    if not math.isfinite(kappa2_a * kappa2_c):
        return 1.0
    return max(1.0 - eta_bar / (kappa2_a * kappa2_c), eta_bar - 1.0)


def bcsgd_gammas(kappa2_a: float, kappa2_c: float, kt2_c: float, eta_bar: float) -> tuple[float, float]:
    """(gamma_upp, gamma_low) of Thm 3.6 from kappa^2(A), kappa^2(C) and the scaled kappa~^2(C)."""
    g_upp = 1.0 - (1.0 - (1.0 - eta_bar / kappa2_a) ** 2) / kt2_c**2
    g_low = 1.0 - (1.0 - (1.0 - eta_bar / kappa2_c) ** 2) / (kt2_c**2 / kappa2_c**2)
    return g_upp, g_low


def bcsgd_floors(
    eta_bar: float, loss_star_half: float, m_upp: float, m_low: float, g_low: float, g_upp: float, depth: int
) -> tuple[float, float]:
    """Limits of Thm 3.6's lower and upper bounds on E||Delta||_F^2 (un-normalised)."""
    low = eta_bar**2 * loss_star_half / (m_upp * (1.0 - g_low**depth)) if g_low < 1 else math.nan
    upp = eta_bar**2 * loss_star_half / (m_low * (1.0 - g_upp**depth)) if g_upp < 1 else math.inf
    return low, upp


def sq_kappa(eigs: torch.Tensor, r: int) -> float:
    """kappa_r^2 from eigenvalues of a Gram matrix (ascending): lambda_max / lambda_r-th largest."""
    lam = eigs.flip(0)
    if r > lam.shape[0] or lam[r - 1] <= lam[0] * 1e-13:
        return math.inf
    return float(lam[0] / lam[r - 1])
