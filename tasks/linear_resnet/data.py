"""Synthetic regression data of paper 003 and the constants its theorems are stated in.

Everything here is computed in float64, whatever the training dtype: L* and the data constants are
the yardsticks of every convergence claim (spec gotcha 8: float32 would floor the relative
suboptimality near 1e-5).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasks.common import generator, haar_orthogonal
from tasks.linear_resnet.params import LinearResNetCommon

F64 = torch.float64


@dataclass(frozen=True)
class Problem:
    """X (d x n), Y (k x n), their Gram matrices, the least-squares solution and its loss.

    `phi` is the minimum-norm least-squares map (Y X^+). It satisfies the normal equations
    phi X X^T = Y X^T, which is what makes the Gram shortcut exact and lets the suboptimality be
    computed without cancellation: L(W) - L* = 1/2 ||(U - phi) X||_F^2 (Lemma B.1).
    """

    x: torch.Tensor
    y: torch.Tensor
    sigma: torch.Tensor  # X X^T, d x d
    cyx: torch.Tensor  # Y X^T, k x d
    phi: torch.Tensor  # least-squares map, k x d
    y_sq: float  # ||Y||_F^2
    loss_star: float  # L* = min_Theta 1/2 ||Theta X - Y||_F^2
    norm_x: float  # ||X||_2
    sigma_r: float  # r-th (smallest nonzero) singular value of X
    rank: int
    kappa: float  # ||X||_2^2 / sigma_r^2(X), the condition number of X X^T on its range
    norm_xf: float  # ||X||_F
    norm_x2inf: float  # max_i ||x_i||_2


def _data_seed(p: LinearResNetCommon) -> int:
    return p.seed if p.data_seed is None else p.data_seed


def make_x(p: LinearResNetCommon) -> torch.Tensor:
    """X ~ N(0,1) i.i.d. (the paper), or with a prescribed spectrum when p.kappa is set (spec §4.3)."""
    g = generator(_data_seed(p), "linear_resnet", "X")
    if p.kappa is None:
        return torch.randn(p.d, p.n, generator=g, dtype=F64)
    u = haar_orthogonal(p.d, g)
    v, _ = torch.linalg.qr(torch.randn(p.n, p.d, generator=g, dtype=F64))  # n x d, orthonormal columns
    if p.d > 1:
        lam = torch.logspace(0.0, float(torch.log10(torch.tensor(p.kappa, dtype=F64))), p.d, dtype=F64)
    else:
        lam = torch.ones(1, dtype=F64)
    # Largest first, so that ||X||^2 = n * kappa and sigma_r^2 = n: kappa(X X^T) = kappa exactly.
    s = torch.sqrt(p.n * lam.flip(0))
    return (u * s.unsqueeze(0)) @ v.T


def make_target_map(p: LinearResNetCommon) -> torch.Tensor:
    if p.target == "neg_identity":
        return -torch.eye(p.k, p.d, dtype=F64)
    g = generator(_data_seed(p), "linear_resnet", "Phi")
    return torch.randn(p.k, p.d, generator=g, dtype=F64) / p.d**0.5


def make_problem(p: LinearResNetCommon) -> Problem:
    x = make_x(p)
    g = generator(_data_seed(p), "linear_resnet", "E")
    # Separate streams for X, Phi and E: changing the noise level keeps X (and so kappa) fixed.
    y = make_target_map(p) @ x + p.noise * torch.randn(p.k, p.n, generator=g, dtype=F64)
    sv = torch.linalg.svdvals(x)
    tol = float(sv[0]) * max(p.d, p.n) * torch.finfo(F64).eps
    rank = int((sv > tol).sum())
    # gelsd handles rank-deficient X and returns the minimum-norm solution.
    phi = torch.linalg.lstsq(x.T, y.T, driver="gelsd").solution.T.contiguous()
    resid = phi @ x - y
    return Problem(
        x=x,
        y=y,
        sigma=x @ x.T,
        cyx=y @ x.T,
        phi=phi,
        y_sq=float((y * y).sum()),
        loss_star=0.5 * float((resid * resid).sum()),
        norm_x=float(sv[0]),
        sigma_r=float(sv[rank - 1]) if rank else 0.0,
        rank=rank,
        kappa=float(sv[0] / sv[rank - 1]) ** 2 if rank else float("inf"),
        norm_xf=float(torch.linalg.matrix_norm(x)),
        norm_x2inf=float(torch.linalg.vector_norm(x, dim=0).max()),
    )
