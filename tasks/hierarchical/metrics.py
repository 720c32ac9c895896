"""Metrics of spec 3.10: normalised MSE, feature errors (orthogonal Procrustes and linear), weight
correlations. All computed in float64 whatever the training precision."""

from __future__ import annotations

import math

import torch

F64 = torch.float64


def nmse(pred: torch.Tensor, y: torch.Tensor) -> float:
    """E(F - y)^2 / Var(y) on one split."""
    pred, y = pred.to(F64), y.to(F64)
    return float(((pred - y) ** 2).mean() / y.var())


def median_se(pred: torch.Tensor, y: torch.Tensor) -> float:
    """Median of (F - y)^2 / Var(y): robust to the heavy tails of spec 6.3."""
    pred, y = pred.to(F64), y.to(F64)
    return float(((pred - y) ** 2).median() / y.var())


def fe_orth(s_true: torch.Tensor, s: torch.Tensor) -> float:
    """min_{U orthogonal} E||S* - U S||^2 / E||S*||^2 (Theorem 2's metric). With M = S^T S*,
    the minimum is ||S*||^2 + ||S||^2 - 2 ||M||_* (orthogonal Procrustes). 0 for a rotated copy;
    1 + E||S||^2 / E||S*||^2 for features independent of S* (1 for S = 0)."""
    a, b = s_true.to(F64), s.to(F64)
    ta, tb = float((a * a).sum()), float((b * b).sum())
    nuc = float(torch.linalg.svdvals(b.T @ a).sum())
    return max(ta + tb - 2.0 * nuc, 0.0) / ta


def fe_lin(s_true: torch.Tensor, s: torch.Tensor) -> float:
    """min_A E||S* - A S||^2 / E||S*||^2 (any linear map; 1 - R^2 without intercept)."""
    a, b = s_true.to(F64), s.to(F64)
    ta = float((a * a).sum())
    if float((b * b).sum()) == 0.0:
        return 1.0
    coef = torch.linalg.lstsq(b, a, driver="gelsd").solution
    res = a - b @ coef
    return float((res * res).sum()) / ta


def row_cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean over neurons (rows) of <a_i/||a_i||, b_i/||b_i||> (spec 3.6's weight correlation)."""
    a, b = a.to(F64), b.to(F64)
    na, nb = a.norm(dim=1), b.norm(dim=1)
    ok = (na > 0) & (nb > 0)
    if not bool(ok.any()):
        return math.nan
    return float(((a[ok] * b[ok]).sum(1) / (na[ok] * nb[ok])).mean())


def gram_change(before: torch.Tensor, after: torch.Tensor) -> float:
    """||B^T B - A^T A||_F / ||A^T A||_F: the function-space change of a layer (spec C5)."""
    ga = after.to(F64).T @ after.to(F64)
    gb = before.to(F64).T @ before.to(F64)
    denom = float(torch.linalg.norm(ga))
    return float(torch.linalg.norm(gb - ga)) / denom if denom > 0 else math.nan
