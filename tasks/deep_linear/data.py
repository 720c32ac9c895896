"""Data of paper 002 and everything precomputed from it: covariances, the SVD of X, the optimum.

Synthetic data (Sec. 4.1): X ~ N(0, 1/d_in) entries, Y ~ U(-1, 2) entries, samples as columns.
The "big condition number" variant keeps X's singular vectors and replaces its singular values by
1e-5 + U(0,1) draws (Sec. 4.1.2). Its cond(X) is very seed dependent (spec G5); this module either
keeps the first draw (`cond_target=None`) or rejection-resamples only the singular values, attempt
k drawn from a generator keyed on (data_seed, k), until cond(X) is within `cond_rtol` of
`cond_target`. X and Y of all three synthetic kinds come from the same stream, so gauss_small and
gauss_bigcond with one data seed share Y and the singular vectors of X.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tasks.common import generator, torch_dtype
from tasks.deep_linear.data_real import load_real
from tasks.deep_linear.params import REAL_DIMS, AnyParams

RANK_RTOL = 1e-10  # singular values below this fraction of sigma_max count as zero (spec G6)
MAX_COND_ATTEMPTS = 100_000


@dataclass
class Problem:
    x: torch.Tensor  # d_in x m
    y: torch.Tensor  # d_out x m
    sxx: torch.Tensor  # X X^T
    syx: torch.Tensor  # Y X^T
    xh: torch.Tensor  # d_in x r_x with X X^T = xh xh^T (U_x Sigma_x): cheap, cancellation-free metric
    sv: torch.Tensor  # all min(d_in, m) singular values of X, descending
    r_x: int  # numerical rank of X
    w_ls: torch.Tensor  # Y X^+ (least-norm least-squares solution)
    w_star: torch.Tensor  # the L2 optimum of the depth-L network (= w_ls unless the width constraint binds)
    err_offset: float  # (1/m)||(W* - W_ls) X||^2: nonzero only when the rank constraint binds
    loss_star: float  # (1/m)||W* X - Y||_F^2 (un-halved, the paper's scale)
    cond_attempts: int  # singular-value draws used (gauss_bigcond), else 1
    sha256: str  # checksum of the real-data files read ("" for synthetic data)
    setup_flops: float

    @property
    def m(self) -> int:
        return self.x.shape[1]

    @property
    def cond_x(self) -> float:
        """sigma_max / sigma_min(d_in, m): the paper's cond(X) (inf when X is rank deficient)."""
        s_min = float(self.sv[-1])
        return float(self.sv[0]) / s_min if s_min > 0 else math.inf

    @property
    def kappa_x(self) -> float:
        """kappa_{r_x}(X) = sigma_1 / sigma_{r_x}: the condition number the theory uses."""
        return float(self.sv[0] / self.sv[self.r_x - 1])


def bigcond_singular_values(data_seed: int, r: int, target: float | None, rtol: float) -> tuple[torch.Tensor, int]:
    """1e-5 + U(0,1) singular values; with a target, resample until cond is within rtol of it."""
    for attempt in range(MAX_COND_ATTEMPTS):
        g = generator(data_seed, "deep_linear", "bigcond_sv", attempt)
        s = 1e-5 + torch.rand(r, generator=g, dtype=torch.float64)
        cond = float(s.max() / s.min())
        if target is None or abs(cond - target) <= rtol * target:
            return s, attempt + 1
    raise RuntimeError(f"no draw within {rtol:.0%} of cond {target} in {MAX_COND_ATTEMPTS} attempts")


def synthetic_xy(p: AnyParams) -> tuple[torch.Tensor, torch.Tensor, int]:
    ds = p.data_seed_eff()
    g = generator(ds, "deep_linear", "data")
    x = torch.randn(p.d_in, p.m, generator=g, dtype=torch.float64) / math.sqrt(p.d_in)
    y = 3.0 * torch.rand(p.d_out, p.m, generator=g, dtype=torch.float64) - 1.0  # U(-1, 2)
    attempts = 1
    if p.data == "gauss_bigcond":
        u, _, vh = torch.linalg.svd(x, full_matrices=False)
        s, attempts = bigcond_singular_values(ds, min(p.d_in, p.m), p.cond_target, p.cond_rtol)
        x = (u * s) @ vh
    elif p.data == "gauss_teacher":
        t = torch.randn(p.d_out, p.d_in, generator=generator(ds, "deep_linear", "teacher"), dtype=torch.float64)
        y = t @ x
    return x, y, attempts


def optimum(
    x: torch.Tensor, y: torch.Tensor, n_min: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, torch.Tensor, float]:
    """SVD of X, the least-norm W_ls = Y X^+, and W* under rank(W) <= n_min (Appendix A).

    Returns (sv, xh, w_ls, r_x, w_star, err_offset). When rank(Y X^+) > n_min the constrained
    optimum keeps the top n_min singular triplets of Y V_x (not the best rank-n approximation of
    Y X^+), and err_offset = (1/m)||(W* - W_ls) X||^2 is what it costs.
    """
    u, s, vh = torch.linalg.svd(x, full_matrices=False)
    r_x = int((s > RANK_RTOL * s[0]).sum())
    u, s_r, vh = u[:, :r_x], s[:r_x], vh[:r_x]
    yv = y @ vh.T  # d_out x r_x
    w_ls = (yv / s_r) @ u.T
    w_star, offset = w_ls, 0.0
    if n_min < min(yv.shape):
        uy, sy, vyh = torch.linalg.svd(yv, full_matrices=False)
        r_star = int((sy > RANK_RTOL * sy[0]).sum())
        if r_star > n_min:
            yv_c = (uy[:, :n_min] * sy[:n_min]) @ vyh[:n_min]
            w_star = (yv_c / s_r) @ u.T
            offset = float((sy[n_min:] ** 2).sum()) / x.shape[1]
    return s, u * s_r, w_ls, r_x, w_star, offset


def make_problem(p: AnyParams) -> Problem:
    sha = ""
    attempts = 1
    if p.data in REAL_DIMS:
        xn, yn, sha = load_real(p.data, p.data_path, p.m, p.pixel_scale)
        x, y = torch.from_numpy(xn), torch.from_numpy(yn)
    else:
        x, y, attempts = synthetic_xy(p)
    sv, xh, w_ls, r_x, w_star, offset = optimum(x, y, min(p.layer_widths()))
    loss_star = float(torch.linalg.matrix_norm(w_star @ x - y) ** 2) / x.shape[1]
    d_in, m, d_out = x.shape[0], x.shape[1], y.shape[0]
    # Setup cost: the two covariances, the thin SVD of X (Golub-Van Loan R-SVD estimate 4 m d^2 + 22 d^3)
    # and the loss at the optimum.
    setup = 2.0 * d_in * d_in * m + 2.0 * d_out * d_in * m + 4.0 * m * d_in**2 + 22.0 * d_in**3 + 2.0 * d_out * d_in * m
    dt = torch_dtype(p.dtype)
    return Problem(
        x=x.to(dt),
        y=y.to(dt),
        sxx=(x @ x.T).to(dt),
        syx=(y @ x.T).to(dt),
        xh=xh.to(dt),
        sv=sv,
        r_x=r_x,
        w_ls=w_ls.to(dt),
        w_star=w_star.to(dt),
        err_offset=offset,
        loss_star=loss_star,
        cond_attempts=attempts,
        sha256=sha,
        setup_flops=setup,
    )
