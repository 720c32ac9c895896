"""The problem class (Eq. 1, 4) and constant-step GD on it.

N instances f_i(x) = 1/2 ||M_i x - y_i||^2 with M_i in R^{b x d}, b < d, stacked as M: (N, b, d) and
Y: (N, b); F(X) = sum_i f_i(x_i) (a sum, not a mean). beta = max_i ||M_i||_2^2 is one global constant
shared by GD and L2O (spec G3), beta_0 = min_i lambda_min(M_i M_i^T) > 0 (full row rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasks.common import generator

F64 = torch.float64


@dataclass(frozen=True)
class Problem:
    m: torch.Tensor  # (N, b, d), float64
    y: torch.Tensor  # (N, b), float64
    beta: float  # max_i ||M_i||_2^2
    beta0: float  # min_i sigma_min(M_i)^2
    beta_inst: torch.Tensor  # (N,) per-instance ||M_i||_2^2

    def to(self, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self.m.to(device=device, dtype=dtype), self.y.to(device=device, dtype=dtype)


def make_problem(n: int, d: int, b: int, data: str, seed: int) -> Problem:
    """The seeded draw of sec. 6.1 ("standard Gaussian"), or one of the spec's variants (G2)."""
    g = generator(seed, "l2o_gd", "data", data)
    m = torch.randn(n, b, d, generator=g, dtype=F64)
    if data == "colnorm":
        m = m / torch.linalg.vector_norm(m, dim=1, keepdim=True)
    if data == "gt":
        x_gt = torch.randn(n, d, generator=g, dtype=F64)
        y = torch.einsum("nbd,nd->nb", m, x_gt)
    else:
        y = torch.randn(n, b, generator=g, dtype=F64)
    s = torch.linalg.svdvals(m)  # (N, b), descending
    beta_inst = s[:, 0] ** 2
    return Problem(m=m, y=y, beta=float(beta_inst.max()), beta0=float((s[:, -1] ** 2).min()), beta_inst=beta_inst)


def residual(m: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """M X - Y per instance; x may carry leading batch dims (..., N, d)."""
    return torch.einsum("nbd,...nd->...nb", m, x) - y


def grad(m: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad F(X) = M^T (M X - Y), blockwise."""
    return torch.einsum("nbd,...nb->...nd", m, residual(m, y, x))


def objective_per_instance(m: torch.Tensor, y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """f_i(x_i) = 1/2 ||M_i x_i - Y_i||^2, shape (..., N)."""
    return 0.5 * (residual(m, y, x) ** 2).sum(-1)


def gd_trajectory(
    m: torch.Tensor, y: torch.Tensor, mult: torch.Tensor, beta: float | torch.Tensor, T: int
) -> torch.Tensor:
    """Per-instance objectives f_i(X_t), t = 0..T, of GD from X_0 = 0 with the step mult/beta.

    `mult` is (C,) (one constant multiplier per trajectory) or (C, N) (per instance); returns (C, T+1, N).
    `beta` is the global constant, or an (N, 1) tensor of it per instance: several problems whose instances
    are laid side by side (a batch of runs, each with its own beta) are one block-diagonal problem.
    Each trajectory runs on its own (N, d) iterate with the same operations, in the same order, as the
    L2O unroll (x - P * g / beta), so that P = 1 reproduces GD bit for bit. A diverging step gives
    inf/NaN entries in its own instances only (they never interact), never an exception.
    """
    outs = []
    for row in mult:
        c = row.reshape(-1, 1) if row.dim() == 1 else row
        x = torch.zeros(m.shape[0], m.shape[2], dtype=m.dtype, device=m.device)
        out = []
        for _ in range(T):
            r = residual(m, y, x)
            out.append(0.5 * (r**2).sum(-1))
            x = x - c * torch.einsum("nbd,nb->nd", m, r) / beta
        out.append(objective_per_instance(m, y, x))
        outs.append(torch.stack(out))
    return torch.stack(outs)


def gd_final_batched(m: torch.Tensor, y: torch.Tensor, mult: torch.Tensor, beta: float, T: int) -> torch.Tensor:
    """f_i(X_T) for many constant multipliers at once, (C, N): the scan for the best constant step."""
    x = torch.zeros(mult.shape[0], m.shape[0], m.shape[2], dtype=m.dtype, device=m.device)
    step = mult.reshape(-1, 1, 1) / beta
    for _ in range(T):
        x = x - step * grad(m, y, x)
    return objective_per_instance(m, y, x)
