"""BCGD (eq. 2.4): one layer per iteration, cyclic order, closed-form gradient and step.

For the layer i, with A = W_{L:(i+1)}, P = W_{(i-1):1} and C = P X, the gradient of the *halved*
L2 loss is G = A^T (M X - Y) C^T = A^T (M Sxx - Syx) P^T (covariance form, M = A W_i P), and the
exact line search along -G is eq. (3.4): eta = ||G||_F^2 / ||A G C||_F^2, with
||A G C||_F^2 = tr(D Sxx D^T), D = A G P. The L2 loss then drops by exactly ||G||^4/||AGC||^2
(halved scale). For the L4 loss (z-b)^4/4 the residual is replaced by J = (M X - Y)^3 in data form
and the step is eq. (3.11): ||G||^2 / (3 ||Delta||_max^2 ||A G C||^2).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from tasks.deep_linear.data import Problem
from tasks.deep_linear.flops import FlopCounter, entries
from tasks.deep_linear.params import BCGDParams
from tasks.deep_linear.sweep import Slot, gauss_seidel_slots
from tasks.deep_linear.theory import sq_kappa, thm32_gamma

MAX_HALVINGS = 60


@dataclass
class Update:
    layer: int  # 1..L, or -1 when every layer moved (GD)
    lr: float
    m: torch.Tensor  # end-to-end matrix after the update
    gamma2: float = math.nan  # Thm 3.2 bound on err_new/err_old for this update (check_thm32)


def a_gram_eigs(a: torch.Tensor | None, d_out: int, counter: FlopCounter) -> torch.Tensor:
    """Eigenvalues (ascending) of A A^T: the squared singular values of A."""
    if a is None:
        return torch.ones(d_out, dtype=torch.float64)
    return counter.eigvalsh(counter.mm(a, a.T)).double()


def c_gram_eigs(p: torch.Tensor | None, prob: Problem, counter: FlopCounter) -> torch.Tensor:
    """Nonzero-part eigenvalues (ascending) of C C^T, C = P X, via P X_h (X X^T = X_h X_h^T)."""
    if p is None:
        return (prob.sv[: prob.r_x] ** 2).flip(0)
    k = counter.mm(p, prob.xh)  # n x r_x, same nonzero singular values as C
    gram = counter.mm(k.T, k) if k.shape[0] >= k.shape[1] else counter.mm(k, k.T)
    return counter.eigvalsh(gram).double()


def layer_gradient(
    slot: Slot, r: torch.Tensor, sxx: torch.Tensor, counter: FlopCounter
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, float, float]:
    """From R = (residual) X^T (d_out x d_in): G, A G, D = A G P, ||AGC||^2 and ||G||^2."""
    g, ag, d, q, g2 = layer_gradients(slot, r, sxx, counter)
    return g, ag, d, float(q), float(g2)


def layer_gradients(
    slot: Slot, r: torch.Tensor, sxx: torch.Tensor, counter: FlopCounter
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`layer_gradient` for one config or a stack of configs (leading config axis): ||AGC||^2 and
    ||G||^2 as tensors, one entry per config (0-dimensional for one)."""
    a, pm = slot.a, slot.p
    rp = r if pm is None else counter.mm(r, pm.mT)
    g = rp if a is None else counter.mm(a.mT, rp)
    ag = g if a is None else counter.mm(a, g)
    d = ag if pm is None else counter.mm(ag, pm)
    q = (counter.mm(d, sxx) * d).sum((-2, -1))
    g2 = (g * g).sum((-2, -1))
    counter.add(2.0 * entries(d) + 2.0 * entries(g))
    return g, ag, d, q, g2


def apply_update(
    ws: list[torch.Tensor],
    slot: Slot,
    step: float | torch.Tensor,
    g: torch.Tensor,
    ag: torch.Tensor,
    d: torch.Tensor,
    order: str,
    counter: FlopCounter,
) -> torch.Tensor:
    """W_i <- W_i - step G; hand A W_i(new) = AW - step AG back to a descending sweep; return M_new.
    One config, or a stack of them with `step` of shape (B, 1, 1)."""
    ws[slot.i - 1] = ws[slot.i - 1] - step * g
    counter.add(2.0 * entries(g))
    if order == "desc":
        if slot.a is None:
            slot.a_after = ws[slot.i - 1]
        else:
            slot.a_after = slot.aw - step * ag
            counter.add(2.0 * entries(ag))
    counter.add(2.0 * entries(d))
    return slot.m - step * d


def _thm32_gamma2(slot: Slot, prob: Problem, eta_bar: float, counter: FlopCounter) -> float:
    d_out = prob.w_ls.shape[0]
    k2a = sq_kappa(a_gram_eigs(slot.a, d_out, counter), d_out)
    k2c = sq_kappa(c_gram_eigs(slot.p, prob, counter), prob.r_x)
    return thm32_gamma(k2a, k2c, eta_bar) ** 2


def _thm32_eta(slot: Slot, prob: Problem, eta_bar: float, counter: FlopCounter) -> float:
    """eq. (3.2): eta_bar / (||A||^2 ||C||^2), spectral norms."""
    na2 = float(a_gram_eigs(slot.a, prob.w_ls.shape[0], counter)[-1])
    nc2 = float(c_gram_eigs(slot.p, prob, counter)[-1])
    return eta_bar / (na2 * nc2) if na2 * nc2 > 0 else 0.0


def bcgd(prob: Problem, ws: list[torch.Tensor], p: BCGDParams, counter: FlopCounter) -> Iterator[Update]:
    """Yield one Update per layer update, forever (the caller decides when to stop)."""
    sxx, syx, x, y = prob.sxx, prob.syx, prob.x, prob.y
    s = float(p.grad_scale)
    d_out, d_in = prob.w_ls.shape
    for slot in gauss_seidel_slots(ws, p.order, counter):
        if p.loss == "l2":
            r = counter.mm(slot.m, sxx) - syx
            counter.add(d_out * d_in)
        else:
            delta = counter.mm(slot.m, x) - y
            r = counter.mm(delta**3, x.T)
            counter.add(3.0 * delta.numel())
        g, ag, d, q, g2 = layer_gradient(slot, r, sxx, counter)
        gamma2 = math.nan
        if p.lr_rule == "opt":
            curv = 1.0 if p.loss == "l2" else 3.0 * float(delta.abs().max()) ** 2
            eta = g2 / (curv * q) if q * curv > 0 else 0.0  # G10: 0/0 means nothing to do
        elif p.lr_rule == "thm32":
            eta = _thm32_eta(slot, prob, p.eta_bar, counter)  # type: ignore[arg-type]  # set for thm32 (validator)
        else:
            eta = float(p.lr)  # type: ignore[arg-type]  # set for const (validator)
        if p.check_thm32:
            gamma2 = _thm32_gamma2(slot, prob, p.eta_bar if p.lr_rule == "thm32" else 1.0, counter)  # type: ignore[arg-type]  # see above
        if p.loss == "l4" and p.l4_backtrack and eta > 0:
            eta = _backtrack_l4(delta, counter.mm(d, x), eta * s, counter) / s
        m_new = apply_update(ws, slot, eta * s, g, ag, d, p.order, counter)
        yield Update(slot.i, eta, m_new, gamma2)


def _backtrack_l4(delta: torch.Tensor, dx: torch.Tensor, step: float, counter: FlopCounter) -> float:
    """Halve the step until sum((Delta - step D X)^4) <= sum(Delta^4) (spec G7, optional)."""
    f0 = float((delta**4).sum())
    for _ in range(MAX_HALVINGS):
        counter.add(5.0 * delta.numel())
        if float(((delta - step * dx) ** 4).sum()) <= f0:
            return step
        step *= 0.5
    return 0.0
