"""BCSGD (Sec. 3.3, eqs. 3.12-3.14): one layer and one sampled datum per iteration.

The datum i is drawn with probability pi(i) = ||(P x_i)^T C||^2 / ||C^T C||_F^2 (eq. 3.13 with the
normalisation of Appendix H, spec G9), and the step is
eta = (sigma_rx^2(C) / sigma_max^2(A)) * eta_bar / ||(P x_i)^T C||^2 (eq. 3.14, with sigma_min read as
the r_x-th singular value, spec G9). The per-update constants of Thm 3.6 (kappa(A), kappa(C),
kappa~(C), gamma_upp, gamma_low) are tracked in `BCSGDStats` so that the task can report the
theorem's floors for the uniform bounds seen along the run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from tasks.common import generator
from tasks.deep_linear.bcgd import Update, a_gram_eigs, c_gram_eigs
from tasks.deep_linear.data import Problem
from tasks.deep_linear.flops import FlopCounter
from tasks.deep_linear.params import BCSGDParams
from tasks.deep_linear.sweep import gauss_seidel_slots
from tasks.deep_linear.theory import bcsgd_gammas, sq_kappa


@dataclass
class BCSGDStats:
    m_upp: float = 0.0  # max kappa^4(A) kappa~^4(C)
    m_low: float = math.inf  # min kappa~^4(C)
    gamma_low: float = math.inf  # min gamma_low
    gamma_upp: float = -math.inf  # max gamma_upp

    def add(self, k2a: float, k2c: float, kt2c: float, eta_bar: float) -> None:
        g_upp, g_low = bcsgd_gammas(k2a, k2c, kt2c, eta_bar)
        self.m_upp = max(self.m_upp, k2a**2 * kt2c**2)
        self.m_low = min(self.m_low, kt2c**2)
        self.gamma_low = min(self.gamma_low, g_low)
        self.gamma_upp = max(self.gamma_upp, g_upp)


def bcsgd(
    prob: Problem,
    ws: list[torch.Tensor],
    p: BCSGDParams,
    counter: FlopCounter,
    stats: BCSGDStats,
    gen: torch.Generator | None = None,
) -> Iterator[Update]:
    """Yield one Update per layer update, forever; the data are sampled from `gen` (default: the run's
    own generator, seeded; a resumed run passes the one restored from its checkpoint)."""
    x, y, sxx = prob.x, prob.y, prob.sxx
    d_out, d_in = prob.w_ls.shape
    eta_bar = float(p.eta_bar)  # type: ignore[arg-type]  # bcsgd requires eta_bar (validator)
    if gen is None:
        gen = generator(p.seed, "deep_linear", "bcsgd_sample")
    for slot in gauss_seidel_slots(ws, p.order, counter):
        a, pm = slot.a, slot.p
        eig_a = a_gram_eigs(a, d_out, counter)
        eig_c = c_gram_eigs(pm, prob, counter)
        s_max_a2 = float(eig_a[-1])
        n_prev = ws[slot.i - 1].shape[1]
        k2a = sq_kappa(eig_a, min(d_out, ws[slot.i - 1].shape[0]))
        k2c = sq_kappa(eig_c, prob.r_x)
        sig_rx2 = float(eig_c[-1]) / k2c if math.isfinite(k2c) else 0.0
        fro_c2 = float(eig_c.sum())
        kt2c = fro_c2 / sig_rx2 if sig_rx2 > 0 else math.inf
        stats.add(k2a, k2c, kt2c, eta_bar)
        # pi(i) ~ ||C^T c_i||^2 = x_i^T Z x_i with Z = P^T P Sxx P^T P.
        ptp = None if pm is None else counter.mm(pm.T, pm)
        z = sxx if ptp is None else counter.mm(counter.mm(ptp, sxx), ptp)
        weights = (counter.mm(z, x) * x).sum(0)
        counter.add(2.0 * x.numel())
        total = float(weights.sum())
        i = int(torch.multinomial(weights.double().clamp_min(0) / total, 1, generator=gen)) if total > 0 else 0
        xi, yi = x[:, i], y[:, i]
        ci = xi if pm is None else counter.mm(pm, xi[:, None])[:, 0]  # P x_i
        ri = counter.mm(slot.m, xi[:, None])[:, 0] - yi
        at_r = ri if a is None else counter.mm(a.T, ri[:, None])[:, 0]  # A^T r_i
        g = torch.outer(at_r, ci)  # gradient of (1/2)||M x_i - y_i||^2 w.r.t. W_i
        counter.add(float(g.numel()))
        denom = float(weights[i])
        eta = (sig_rx2 / s_max_a2) * eta_bar / denom if denom > 0 and s_max_a2 > 0 else 0.0
        step = eta * p.grad_scale
        # D = A G P = (A A^T r_i)(P^T P x_i)^T
        left = at_r if a is None else counter.mm(a, at_r[:, None])[:, 0]
        right = ci if pm is None else counter.mm(pm.T, ci[:, None])[:, 0]
        d = torch.outer(left, right)
        counter.add(float(d.numel()) + 2.0 * g.numel() + 2.0 * d.numel())
        ws[slot.i - 1] = ws[slot.i - 1] - step * g
        if p.order == "desc":
            slot.a_after = ws[slot.i - 1] if a is None else slot.aw - step * (a @ g)
            if a is not None:
                counter.add(2.0 * d_out * ws[slot.i - 1].shape[0] * n_prev + 2.0 * d_out * n_prev)
        yield Update(slot.i, eta, slot.m - step * d)
