"""The unrolled Math-L2O trajectory (Eq. 2) and its three gradient modes.

X_t = X_{t-1} - (1/beta) P_t * grad F(X_{t-1}),  P_t = g_W(X_{t-1}, grad F(X_{t-1})),  X_0 = 0.

- detach (the paper, after Liu et al. 2023): the MLP's inputs are detached, so dX_t/dX_{t-1} =
  I - (1/beta) diag(P_t) M^T M (Eq. 28) and the training gradient is a surrogate of dF(X_T)/dW.
- full: the inputs keep their graph (Eq. 27), the true gradient.
- frozen: the features z_t are given (taken from an earlier run); F(X_T) as a function of W with these
  features held fixed has exactly the detached gradient, which finite differences can check.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tasks.l2o_gd.model import step_multiplier
from tasks.l2o_gd.problem import objective_per_instance, residual

SAT = 1e-3  # P within this of 0 or 2 counts as a saturated sigmoid (spec G5)


@dataclass
class Unrolled:
    loss: torch.Tensor  # F(X_T), with graph unless run under no_grad
    f_inst: torch.Tensor  # (T+1, N) per-instance objectives f_i(X_t), detached, float64
    x_norm: torch.Tensor  # (T+1,) ||X_t||, detached
    p_min: float
    p_max: float
    p_mean: float
    p_sat: float  # fraction of (t, coordinate) pairs with P within SAT of 0 or 2
    p_mean_t: list[float]  # mean P_t over coordinates, t = 1..T
    features: list[torch.Tensor] = field(default_factory=list)  # z_t, detached, (K, 2) each
    p_first: torch.Tensor | None = None  # P_1 and P_T (N, d), detached
    p_last: torch.Tensor | None = None
    hidden_last: torch.Tensor | None = None  # G_{L-1,T}^T (K, n_{L-1}), detached
    iterates: list[torch.Tensor] = field(default_factory=list)  # X_1..X_T, detached (record=True)


def unroll(
    ws: list[torch.Tensor],
    m: torch.Tensor,
    y: torch.Tensor,
    beta: float,
    T: int,
    mode: str = "detach",
    frozen: list[torch.Tensor] | None = None,
    keep: bool = False,
    record: bool = False,
) -> Unrolled:
    """T steps from X_0 = 0. `keep` stores the features, P_1, P_T and G_{L-1,T} for diagnostics;
    `record` the iterates."""
    n, _, d = m.shape
    x = torch.zeros(n, d, dtype=m.dtype, device=m.device)
    f_inst: list[torch.Tensor] = []
    x_norm: list[torch.Tensor] = [torch.zeros((), dtype=m.dtype, device=m.device)]
    # per-step statistics stay on the device until the end (no host sync inside the loop on CUDA)
    stats: list[torch.Tensor] = []
    out = Unrolled(torch.zeros(()), torch.zeros(0), torch.zeros(0), 0.0, 0.0, 0.0, 0.0, [])
    for t in range(T):
        r = residual(m, y, x)
        f_inst.append(0.5 * (r.detach().double() ** 2).sum(-1))
        g = torch.einsum("nbd,nb->nd", m, r)  # keeps the graph: the update needs dg/dX
        if frozen is not None:
            z = frozen[t]
        elif mode == "full":
            z = torch.stack([x, g], -1).reshape(-1, 2)
        else:
            z = torch.stack([x.detach(), g.detach()], -1).reshape(-1, 2)
        p_flat, h = step_multiplier(ws, z)
        p = p_flat.reshape(n, d)
        x = x - p * g / beta
        with torch.no_grad():
            pd = p.detach()
            sat_frac = ((pd < SAT) | (pd > 2.0 - SAT)).to(pd.dtype).mean()
            stats.append(torch.stack([pd.min(), pd.max(), pd.mean(), sat_frac]))
            x_norm.append(torch.linalg.vector_norm(x.detach()))
        if record:
            out.iterates.append(x.detach())
        if keep:
            out.features.append(z.detach())
            if t == 0:
                out.p_first = pd
            if t == T - 1:
                out.p_last, out.hidden_last = pd, h.detach()
    f_last = objective_per_instance(m, y, x)
    f_inst.append(f_last.detach().double())
    out.loss = f_last.sum()
    out.f_inst = torch.stack(f_inst).cpu()
    out.x_norm = torch.stack(x_norm).double().cpu()
    if stats:
        st = torch.stack(stats).double().cpu()  # (T, 4)
        out.p_min, out.p_max = float(st[:, 0].min()), float(st[:, 1].max())
        out.p_mean, out.p_sat = float(st[:, 2].mean()), float(st[:, 3].mean())
        out.p_mean_t = st[:, 2].tolist()
    return out
