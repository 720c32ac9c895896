"""The quantities of Thm 4.7 (Eq. 12-14) in log space, with X_0 = 0 and C_l = 1 (spec section 4).

delta_4 = sigmoid(c)(1 - sigmoid(c)) with c = delta_3 Theta_L ~ 1e5..1e8 underflows float64, so every
condition is returned as a log10 margin, log10(LHS) - log10(RHS): >= 0 means the condition holds.
alpha_0 = 0 (the spec's finding, G8) gives -inf margins, never an exception.
"""

from __future__ import annotations

import math

import numpy as np


def lambdas(beta: float, u: float, T: int) -> np.ndarray:
    """Lambda_j, j = 1..T, with x0 = 0: (2j-1)(beta(2j-1) + (2j-2))/beta^2 u^2."""
    j = np.arange(1, T + 1, dtype=np.float64)
    return (2 * j - 1) * (beta * (2 * j - 1) + (2 * j - 2)) / beta**2 * u**2


def sum_lambda_closed(beta: float, u: float, T: int) -> float:
    """Eq. 53: sum_t Lambda_t = 4(beta+1)/(3 beta^2) u^2 T^3 - u^2 T^2/beta^2 - (beta+1)/(3 beta^2) u^2 T."""
    return (4 * (beta + 1) / (3 * beta**2) * T**3 - T**2 / beta**2 - (beta + 1) / (3 * beta**2) * T) * u**2


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def log_sigmoid_prime(c: float) -> float:
    """log(sigmoid(c)(1 - sigmoid(c))) = -softplus(-c) - softplus(c), finite for any c."""
    return -_softplus(-c) - _softplus(c)


def _logaddexp(a: float, b: float) -> float:
    return float(np.logaddexp(a, b))


def _log(x: float) -> float:
    if math.isnan(x):
        return math.nan  # alpha_0 not computed (svd off): margins unknown, not violated
    return math.log(x) if x > 0 else -math.inf


def thm47(
    beta: float, beta0: float, u: float, y_norm: float, T: int, lam_bar: list[float], alpha0: float, eta: float
) -> dict[str, float]:
    """log10 margins of (13a-d) and (14a-b), the log10 rate deficit, and the constants behind them.

    `lam_bar` = ||W_l^0||_2 + C_l per layer (C_l = 1), `u` = ||M^T Y||, `y_norm` = ||Y||.
    """
    lam = lambdas(beta, u, T)
    sum_lam = float(lam.sum())
    log_theta = float(np.sum(np.log(lam_bar)))
    log_theta_m1 = float(np.sum(np.log(lam_bar[:-1])))
    s2 = float(np.sum(np.asarray(lam_bar) ** -2.0))
    log_fac = _log_growth(beta, u, T, log_theta)  # suffix sums give prod_{j=s+1..T}
    suffix = np.concatenate([np.cumsum(log_fac[::-1])[::-1][1:], [0.0]])  # suffix[s-1] = sum_{j>s}
    log_delta2 = float(np.logaddexp.reduce(suffix[: T - 1] + np.log(lam[: T - 1]))) if T > 1 else -math.inf
    delta3 = (2 * T - 1 + (2 * T - 2) / beta) * u
    log_d4 = log_sigmoid_prime(delta3 * math.exp(log_theta))
    a_term = (2 * T + 1) * y_norm  # sqrt(beta) x0 + (2T+1)||Y||
    b_term = (2 * T - 2) / beta * u  # x0 + (2T-2)/beta u
    la = _log(alpha0)
    lb, lb0 = math.log(beta), math.log(beta0)
    rhs_a = (
        log_theta
        - math.log(min(lam_bar))
        + 2.5 * lb
        - math.log(8)
        - 2 * lb0
        - 2 * log_d4
        + _log(sum_lam)
        + _log(a_term)
    )
    rhs_b = (
        math.log1p(beta)
        + 2.5 * lb
        - math.log(2)
        - 2 * lb0
        - 2 * log_d4
        + log_theta
        + log_theta_m1
        + math.log(s2)
        + _log(a_term)
        + _log(b_term)
        + _log(sum_lam)
    )
    # (13c)'s bracket: -1/2 Theta_{L-1}^2 Lambda_T sum_{t<T} Lambda_t + Theta_L^2 S2 (Lambda_T + delta_2) sum Lambda
    log_neg = 2 * log_theta_m1 + math.log(lam[-1]) + _log(float(lam[:-1].sum())) - math.log(2)
    log_pos = 2 * log_theta + math.log(s2) + _logaddexp(math.log(lam[-1]), log_delta2) + _log(sum_lam)
    if log_pos > log_neg:
        log_bracket = log_pos + math.log1p(-math.exp(log_neg - log_pos))
        rhs_c = 3 * lb - math.log(4) - 2 * lb0 - 2 * log_d4 + log_bracket
        margin_c = 2 * la - rhs_c
    else:  # a non-positive right-hand side: the condition holds trivially
        margin_c = math.inf
    rhs_d = math.log(8) + math.log1p(beta) + _log(b_term)
    log_eta_a = (
        math.log(8)
        - lb
        + _logaddexp(log_delta2, math.log(lam[-1]))
        - _logaddexp(log_delta2, _log(sum_lam))
        - 2 * _log(sum_lam)
        - log_theta
        - math.log(s2)
    )
    log_eta_b = -math.log(4) + 2 * lb - 2 * lb0 - 2 * log_d4 - 2 * la
    log_deficit = math.log(4 * eta) + 2 * lb0 - 2 * lb + log_d4 + 2 * la
    ten = math.log(10)
    return {
        "th_sum_lambda": sum_lam,
        "th_log10_delta2": log_delta2 / ten,
        "th_delta3_theta": delta3 * math.exp(log_theta),
        "th_log10_delta4": log_d4 / ten,
        "th_margin_13a": (2 * la - rhs_a) / ten,
        "th_margin_13b": (3 * la - rhs_b) / ten,
        "th_margin_13c": margin_c / ten,
        "th_margin_13d": (la - rhs_d) / ten,
        "th_log10_eta_max_14a": log_eta_a / ten,
        "th_log10_eta_max_14b": log_eta_b / ten,
        "th_log10_rate_deficit": log_deficit / ten,
    }


def _log_growth(beta: float, u: float, T: int, log_theta: float) -> np.ndarray:
    """log(1 + (1+beta)/2 Theta_L Phi_j), j = 1..T, with Phi_j = (2j-1)/beta ||M^T Y|| (X_0 = 0): the factor
    by which one unrolled step may amplify a change of the weights (Eq. 12)."""
    phi = (2 * np.arange(1, T + 1) - 1) / beta * u
    return np.log1p((1 + beta) / 2 * math.exp(log_theta) * phi)


def log_delta1(beta: float, u: float, T: int, lam_bar: list[float]) -> np.ndarray:
    """log delta_1^t, t = 1..T: delta_1^t = sum_{s<=t} [prod_{j=s+1..t} (1 + (1+beta)/2 Theta_L Phi_j)] Lambda_s.

    With C_t = sum_{j<=t} log(1 + ...), the product is exp(C_t - C_s), so log delta_1^t = C_t +
    logsumexp_{s<=t}(log Lambda_s - C_s): a running log-sum-exp, finite however large the product grows.
    """
    log_theta = float(np.sum(np.log(lam_bar)))
    c = np.cumsum(_log_growth(beta, u, T, log_theta))
    return c + np.logaddexp.accumulate(np.log(lambdas(beta, u, T)) - c)


def log10_semi_smooth_ratios(
    dx_norm: np.ndarray, dw_norms: list[float], beta: float, u: float, T: int, lam_bar: list[float]
) -> np.ndarray:
    """Lemma 4.5 (spec C11) as log10(||X_t^{k+1} - X_t^k|| / bound_t), t = 1..T, bound_t = 1/2 delta_1^t
    Theta_L sum_l ||W_l^{k+1} - W_l^k||_2 / lam_bar_l; <= 0 means the lemma holds at t. `dx_norm` is
    ||X_t^{k+1} - X_t^k||, t = 1..T. -inf where nothing moved."""
    step = sum(dw / lb for dw, lb in zip(dw_norms, lam_bar, strict=True))
    if step <= 0:
        return np.full(T, -math.inf)
    log_bound = math.log(0.5) + log_delta1(beta, u, T, lam_bar) + float(np.sum(np.log(lam_bar))) + math.log(step)
    with np.errstate(divide="ignore"):  # an iterate that did not move: log 0 = -inf
        log_dx = np.log(np.asarray(dx_norm, dtype=np.float64))
    return np.asarray((log_dx - log_bound) / math.log(10))


def lemma42_bound(beta: float, u: float, T: int) -> np.ndarray:
    """Lemma 4.2 with X_0 = 0: ||X_t|| <= (2t/beta) ||M^T Y||, t = 1..T."""
    return 2 * np.arange(1, T + 1, dtype=np.float64) / beta * u


def lemma43_bound(beta: float, lam_bar: list[float], sum_lam: float, res_norm: float) -> list[float]:
    """Lemma 4.3: ||dF/dW_l||_2 <= sqrt(beta) Theta_L / (2 lam_bar_l) (sum_t Lambda_t) ||M X_T - Y||."""
    theta = float(np.prod(lam_bar))
    return [math.sqrt(beta) * theta / (2 * lb) * sum_lam * res_norm for lb in lam_bar]


def delta7(sv: np.ndarray, beta: float, T: int) -> float:
    """App. B's delta_7 = sigma_min(sum_{t=1}^{T-1} (I - M^T M/beta)^{T-t}) of the block-diagonal problem.

    The matrix is symmetric with eigenvalues sum_{s=1}^{T-1} mu^s, mu = 1 - lambda/beta over the
    nonzero eigenvalues lambda of each M_i^T M_i (its squared singular values `sv`); the null space
    (mu = 1) gives T - 1, the largest possible value, so it never sets the minimum. The instance
    attaining beta has mu = 0, so delta_7 = 0 and App. B's explicit
    bounds on e are infinite (spec C9)."""
    mu = 1.0 - np.asarray(sv, dtype=np.float64) ** 2 / beta
    s = np.arange(1, T, dtype=np.float64)
    sums = np.abs((mu[..., None] ** s).sum(-1)) if T > 1 else np.zeros_like(mu)
    return float(sums.min())
