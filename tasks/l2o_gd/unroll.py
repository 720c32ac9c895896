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
    """T steps from X_0 = 0 of one net `ws` (W_1..W_L) on one problem. `keep` stores the features, P_1, P_T
    and G_{L-1,T} for diagnostics; `record` the iterates. A batch of one of `unroll_batch`."""
    return unroll_batch(
        [w.unsqueeze(0) for w in ws],
        m,
        y,
        beta,
        T,
        mode,
        None if frozen is None else [z.unsqueeze(0) for z in frozen],
        keep,
        record,
    )[0]


def unroll_batch(
    ws: list[torch.Tensor],
    m: torch.Tensor,
    y: torch.Tensor,
    beta: float | torch.Tensor,
    T: int,
    mode: str = "detach",
    frozen: list[torch.Tensor] | None = None,
    keep: bool = False,
    record: bool = False,
) -> list[Unrolled]:
    """K nets at once, each on its own problem: `ws` are (K, n_l, n_{l-1}); the members' instances lie side by
    side in `m` (K N, b, d) and `y` (K N, b), with `beta` a float or each instance's member's beta as (K N, 1).
    The problem part is then one block-diagonal problem (instances never interact) and the MLP a batched
    matmul, so a member's numbers do not depend on the others (a NaN stays in its member). `frozen`: the
    features per step, (K, N d, 2) each. One `Unrolled` per member; each `loss` keeps its graph."""
    k = ws[0].shape[0]
    n, d = m.shape[0] // k, m.shape[2]
    x = torch.zeros(k * n, d, dtype=m.dtype, device=m.device)
    f_inst: list[torch.Tensor] = []
    x_norm: list[torch.Tensor] = [torch.zeros(k, dtype=m.dtype, device=m.device)]
    # per-step statistics stay on the device until the end (no host sync inside the loop on CUDA)
    stats: list[torch.Tensor] = []
    features: list[torch.Tensor] = []
    iterates: list[torch.Tensor] = []
    p_first = p_last = hidden_last = None
    for t in range(T):
        r = residual(m, y, x)
        f_inst.append(0.5 * (r.detach().double() ** 2).sum(-1))
        g = torch.einsum("nbd,nb->nd", m, r)  # keeps the graph: the update needs dg/dX
        if frozen is not None:
            z = frozen[t]
        elif mode == "full":
            z = torch.stack([x, g], -1).reshape(k, n * d, 2)
        else:
            z = torch.stack([x.detach(), g.detach()], -1).reshape(k, n * d, 2)
        p_flat, h = step_multiplier(ws, z)
        p = p_flat.reshape(k * n, d)
        x = x - p * g / beta
        with torch.no_grad():
            pd = p.detach().reshape(k, n * d)
            sat_frac = ((pd < SAT) | (pd > 2.0 - SAT)).to(pd.dtype).mean(-1)
            stats.append(torch.stack([pd.amin(-1), pd.amax(-1), pd.mean(-1), sat_frac], -1))
            x_norm.append(torch.linalg.vector_norm(x.detach().reshape(k, n * d), dim=-1))
        if record:
            iterates.append(x.detach().reshape(k, n, d))
        if keep:
            features.append(z.detach())
            if t == 0:
                p_first = pd.reshape(k, n, d)
            if t == T - 1:
                p_last, hidden_last = pd.reshape(k, n, d), h.detach()
    f_last = objective_per_instance(m, y, x)
    f_inst.append(f_last.detach().double())
    losses = f_last.reshape(k, n).sum(-1)
    f_all = torch.stack(f_inst).cpu().reshape(T + 1, k, n)
    norms = torch.stack(x_norm).double().cpu()  # (T+1, K)
    st = torch.stack(stats).double().cpu() if stats else None  # (T, K, 4)
    outs = []
    for i in range(k):
        out = Unrolled(losses[i], f_all[:, i], norms[:, i], 0.0, 0.0, 0.0, 0.0, [])
        if st is not None:
            out.p_min, out.p_max = float(st[:, i, 0].min()), float(st[:, i, 1].max())
            out.p_mean, out.p_sat = float(st[:, i, 2].mean()), float(st[:, i, 3].mean())
            out.p_mean_t = st[:, i, 2].tolist()
        out.features = [z[i] for z in features]
        out.iterates = [xt[i] for xt in iterates]
        if keep:
            out.p_first = None if p_first is None else p_first[i]
            out.p_last = None if p_last is None else p_last[i]
            out.hidden_last = None if hidden_last is None else hidden_last[i]
        outs.append(out)
    return outs
