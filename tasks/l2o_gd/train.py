"""The training loop of sec. 6.3: full-batch gradient descent on F(X_T), one step per epoch.

Epoch k runs the unrolled trajectory with W^k (so the row logged at step k describes W^k: step 0 is
the initialisation, exactly GD), then, for k < epochs, takes W^{k+1} = W^k - lr dF(X_T)/dW^k.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tasks.base import RunContext
from tasks.l2o_gd.member import Member, Outcome
from tasks.l2o_gd.params import L2OParams
from tasks.l2o_gd.problem import Problem
from tasks.l2o_gd.unroll import unroll_batch


def train(p: L2OParams, prob: Problem, ctx: RunContext, base: dict[str, Any]) -> Outcome:
    """One run's training: a batch of one."""
    return train_batch([p], [prob], [ctx], [base])[0]


def train_batch(
    ps: Sequence[L2OParams], probs: Sequence[Problem], ctxs: Sequence[RunContext], bases: Sequence[dict[str, Any]]
) -> list[Outcome]:
    """Several runs of one shape (`l2o_batch_key`) trained together: their weights carry a leading member axis,
    their problems lie side by side (`unroll_batch`), and the summed loss gives each member its own gradient
    (the members share nothing), applied with its own learning rate. A member that diverges, finishes or whose
    `report` answers False leaves the batch at that epoch; the others go on. Everything else, the evaluation,
    the diagnostics and the curve, is each member's own `Member` bookkeeping, as in a single run."""
    mems = [Member(p, prob, ctx, base) for p, prob, ctx, base in zip(ps, probs, ctxs, bases, strict=True)]
    p0, device, dt = ps[0], ctxs[0].device, mems[0].dt  # one batch key: one shape, dtype and device
    # Members of a batch resume from one step (tasks.resume_state.by_resume_step): the weights W^start.
    start = max(0 if ctx.resume is None else ctx.resume.step for ctx in ctxs)
    for mem in mems:
        if mem.ctx.resume is not None:
            mem.restore(mem.ctx.resume)
        elif p0.epochs == 0:
            mem.save(0, mem.ws0)
    active = [i for i, mem in enumerate(mems) if not mem.done]
    if not active:
        return [mem.outcome() for mem in mems]
    ws = [torch.stack([mems[i].w_start[layer] for i in active]).requires_grad_(True) for layer in range(p0.depth)]
    m, y, beta = _side_by_side([mems[i] for i in active])
    for k in range(start, p0.epochs + 1):
        diag = any(k in mems[i].diag_at for i in active)
        outs = unroll_batch(ws, m, y, beta, p0.T, mems[0].mode, keep=diag, record=diag and k < p0.epochs)
        live = [j for j, i in enumerate(active) if mems[i].alive(k, outs[j], [w[j] for w in ws])]
        need = [j for j in live if k < p0.epochs or k in mems[active[j]].diag_at]
        grads = list(torch.autograd.grad(torch.stack([outs[j].loss for j in need]).sum(), ws)) if need else []
        # W^k, the weights this epoch's pass used, kept exactly for the float64 evaluation and the diagnostics
        ws_k = {j: [w[j].detach().clone() for w in ws] for j in live if mems[active[j]].keeps_row(k)}
        if k < p0.epochs and grads:
            lr = torch.tensor([mems[i].p.lr for i in active], dtype=dt, device=device)
            with torch.no_grad():
                for w, g in zip(ws, grads, strict=True):
                    w -= lr.reshape(-1, 1, 1) * g
        for j in ws_k:
            mems[active[j]].observe(k, outs[j], [g[j] for g in grads], ws_k[j], [w[j] for w in ws])
        if k < p0.epochs:  # the state after epoch k is W^{k+1} and the rows of epochs <= k
            for j, i in enumerate(active):
                if not mems[i].done:
                    mems[i].save(k + 1, [w[j] for w in ws])
        keep = [j for j, i in enumerate(active) if not mems[i].done]
        if len(keep) < len(active):
            if not keep:
                break
            active = [active[j] for j in keep]
            ws = [w.detach()[keep].clone().requires_grad_(True) for w in ws]
            m, y, beta = _side_by_side([mems[i] for i in active])
    return [mem.outcome() for mem in mems]


def _side_by_side(mems: list[Member]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The members' problems as one block-diagonal problem: M (K N, b, d), Y (K N, b), and each instance's
    member's beta (K N, 1)."""
    beta = torch.tensor([mem.prob.beta for mem in mems], dtype=mems[0].dt, device=mems[0].m.device)
    n = mems[0].p.n_problems
    return torch.cat([mem.m for mem in mems]), torch.cat([mem.y for mem in mems]), beta.repeat_interleave(n)[:, None]
