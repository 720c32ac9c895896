"""The theorems' step sizes, rates and conditions, as spec §1.6 writes them (with the proofs'
explicit constants). Notation: lam_* = ||.||_2, mu_* = sigma_min, norm_x = ||X||_2,
sigma_r = sigma_r(X), loss0 = L(W(0)), loss_star = L*, depth = L.

The constants are loose (the paper's own runs have margin <= 0.5 << 25.35, spec §4.5): these are
recorded per run so that analysis can test scalings without the task code.
"""

from __future__ import annotations

import math

E = math.e
C_PROOF = 4.0 * math.sqrt(2.0 * E**3)  # C of condition (4.1), from the proof of Thm 3.1 (A.1): ~25.35
C1_GD = 1.0 / (2.0 * E)  # a safe C1 of Thm 3.1's step-size bound
C1_SGD_38 = math.log(2.0) / (96.0 * E**3)  # Thm 3.8's C1 (the proof's 96 e^3, spec §1.6)


def normalized_step(c: float, depth: int, lam_a: float, lam_b: float, norm_x: float) -> float:
    """eta = c / (L ||A||^2 ||B||^2 ||X||^2) (spec gotcha 2): one c transfers across configs."""
    return c / (depth * lam_a**2 * lam_b**2 * norm_x**2)


def gd_step_proof(depth: int, lam_a: float, lam_b: float, norm_x: float, loss0: float) -> float:
    """The step the proof of Thm 3.1 uses: 1 / (2 L lA lB ||X|| (sqrt(e L0) + 0.5 e lA lB ||X||))."""
    s = lam_a * lam_b * norm_x
    return 1.0 / (2.0 * depth * s * (math.sqrt(E * loss0) + 0.5 * E * s))


def gd_step_bound(depth: int, lam_a: float, lam_b: float, norm_x: float, loss0: float, c1: float = C1_GD) -> float:
    """Thm 3.1: eta <= C1 / (L lA lB ||X|| (sqrt(L0) + lA lB ||X||))."""
    s = lam_a * lam_b * norm_x
    return c1 / (depth * s * (math.sqrt(loss0) + s))


def contraction(eta: float, depth: int, mu_a: float, mu_b: float, sigma_r: float) -> float:
    """Per-step factor of Thm 3.1 (and 3.8): 1 - eta L mu_A^2 mu_B^2 sigma_r^2(X) / e.

    Depends on eta L only: with eta ~ 1/L the iteration count is independent of depth.
    """
    return 1.0 - eta * depth * mu_a**2 * mu_b**2 * sigma_r**2 / E


def margin(
    mu_a: float,
    mu_b: float,
    lam_a: float,
    lam_b: float,
    norm_x: float,
    sigma_r: float,
    loss0: float,
    loss_star: float,
    n_over_batch: float = 1.0,
) -> float:
    """C_eff of spec §4.5: condition (4.1) holds iff C_eff >= C_PROOF.

    C_eff = [mu_A^2 mu_B^2 / (lA lB)] / [||X|| sqrt(L0 - L*) / sigma_r^2]. For SGD (Thm 3.8, which
    has sqrt(L0) and an extra n/B on the right) pass n_over_batch = n/B and loss_star = 0.
    """
    lhs = mu_a**2 * mu_b**2 / (lam_a * lam_b)
    rhs = n_over_batch * norm_x * math.sqrt(max(loss0 - loss_star, 0.0)) / sigma_r**2
    return lhs / rhs if rhs > 0 else math.inf


def alpha_min_modified_identity(norm_x: float, sigma_r: float, y_sq: float, loss_star: float) -> float:
    """Sec. 4: modified identity meets (4.1) iff alpha >= C ||X|| (||Y||^2/2 - L*)^{1/2} / sigma_r^2."""
    return C_PROOF * norm_x * math.sqrt(max(0.5 * y_sq - loss_star, 0.0)) / sigma_r**2


def sgd_step_thm38(
    batch: int,
    n: int,
    depth: int,
    mu_a: float,
    mu_b: float,
    lam_a: float,
    lam_b: float,
    norm_x: float,
    sigma_r: float,
    horizon: int,
    delta: float = 0.1,
    c1: float = C1_SGD_38,
) -> float:
    """Thm 3.8 (L* = 0): eta <= C1 B^2 mu_A^2 mu_B^2 sigma_r^2 / (L n^2 lA^4 lB^4 ||X||^4 log(T/delta))."""
    log_term = max(math.log(horizon / delta), 1e-12)
    num = c1 * batch**2 * mu_a**2 * mu_b**2 * sigma_r**2
    return num / (depth * n**2 * lam_a**4 * lam_b**4 * norm_x**4 * log_term)


def pl_lower(mu_a: float, mu_b: float, sigma_r: float) -> float:
    """Lemma A.1: ||grad_l||_F^2 >= (2/e) mu_A^2 mu_B^2 sigma_r^2 (L - L*) near the origin."""
    return 2.0 / E * mu_a**2 * mu_b**2 * sigma_r**2


def grad_upper(lam_a: float, lam_b: float, norm_x: float) -> float:
    """Lemma A.1: ||grad_l||_F^2 <= 2 e lA^2 lB^2 ||X||^2 (L - L*) near the origin."""
    return 2.0 * E * lam_a**2 * lam_b**2 * norm_x**2
