"""Full-batch GD on the deep linear network (end-to-end back-propagation), covariance form.

Every layer moves from the same weights: G_j = S_j^T (M Sxx - Syx) P_{j-1}^T with the suffix
S_j = W_{L:(j+1)} and the prefix P_{j-1} = W_{(j-1):1}, the gradient of the *halved* loss
(spec G2: the paper's quoted GD steps 1e-5 / 2e-5 only match this convention).
The Du & Hu step n_L / (3 L ||X||^2) is offered because the paper reports that it diverges.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator

import torch

from tasks.deep_linear.bcgd import Update
from tasks.deep_linear.data import Problem
from tasks.deep_linear.flops import FlopCounter, entries


def du_hu_lr(prob: Problem, depth: int) -> float:
    d_out = prob.w_ls.shape[0]
    return d_out / (3.0 * depth * float(prob.sv[0]) ** 2)


def _prefixes(ws: list[torch.Tensor], counter: FlopCounter) -> tuple[list[torch.Tensor | None], torch.Tensor]:
    """pref[j] = W_j..W_1 for j < L (pref[0] = None = identity) and the end-to-end M."""
    depth = len(ws)
    pref: list[torch.Tensor | None] = [None] * depth
    if depth >= 2:
        pref[1] = ws[0]
    for j in range(2, depth):
        pref[j] = counter.mm(ws[j - 1], pref[j - 1])  # type: ignore[arg-type]  # the products are filled before use
    m = ws[0] if depth == 1 else counter.mm(ws[depth - 1], pref[depth - 1])  # type: ignore[arg-type]  # the products are filled before use
    return pref, m


def gd(
    prob: Problem, ws: list[torch.Tensor], lr: float, grad_scale: int, counter: FlopCounter, resumed: bool = False
) -> Iterator[Update]:
    """Yield one Update (layer=-1: all layers) per GD iteration, forever (`resumed`: see gd_steps)."""
    for m in gd_steps(prob.sxx, prob.syx, ws, lr * grad_scale, counter, resumed):
        yield Update(-1, lr, m)


def gd_steps(
    sxx: torch.Tensor,
    syx: torch.Tensor,
    ws: list[torch.Tensor],
    step: float | torch.Tensor,
    counter: FlopCounter,
    resumed: bool = False,
) -> Generator[torch.Tensor, list[int] | None, None]:
    """Update `ws` in place by GD steps of size `step` (the gradient's scale included) and yield the
    end-to-end matrix after each, forever. Written for one config's matrices or a stack of them with a
    leading config axis (then `step` has shape (B, 1, 1)): the same operations either way. A stack's
    owner may send the rows to keep (members that stopped dropped): the next steps compute only those.
    `resumed`: `ws` are a checkpoint's, whose flop count already holds the products of these weights (the
    run computed them after its last step), so they are counted again nowhere."""
    depth = len(ws)
    pref, m = _prefixes(ws, FlopCounter(counter.product) if resumed else counter)
    while True:
        r = counter.mm(m, sxx) - syx
        counter.add(entries(r))
        suf: list[torch.Tensor | None] = [None] * (depth + 1)  # suf[j] = W_L..W_{j+1}
        if depth >= 2:
            suf[depth - 1] = ws[depth - 1]
        for j in range(depth - 2, 0, -1):
            suf[j] = counter.mm(suf[j + 1], ws[j])  # type: ignore[arg-type]  # the products are filled before use
        grads = []
        for j in range(1, depth + 1):
            pj = pref[j - 1]
            rp = r if pj is None else counter.mm(r, pj.mT)
            grads.append(rp if suf[j] is None else counter.mm(suf[j].mT, rp))  # type: ignore[union-attr]  # the products are filled before use
        for j, g in enumerate(grads):  # simultaneous (Jacobi) update from the same weights
            ws[j] = ws[j] - step * g
            counter.add(2.0 * entries(g))
        pref, m = _prefixes(ws, counter)
        keep = yield m
        if keep is not None:
            rows = torch.tensor(keep, device=m.device)
            ws[:] = [w[rows] for w in ws]
            pref = [None if q is None else q[rows] for q in pref]
            m, sxx, syx = m[rows], sxx[rows], syx[rows]
            step = step[rows] if isinstance(step, torch.Tensor) else step
