"""Algorithm 1 of paper 003: GD and minibatch SGD from a fixed starting point, with the metrics the
theorems speak about (suboptimality L - L*, its ratio to L0 - L*, gradient norms, distance from init).

GD evaluates the full loss at every iterate (it comes with the gradient), so its thresholds are exact.
SGD evaluates the full loss only every `log_every` steps (an extra Gram pass, counted in the flops),
so its thresholds and best iterate have that resolution; divergence is checked on every batch loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from tasks.base import Checkpoint, RunContext, is_diverged
from tasks.linear_resnet import flops as F
from tasks.linear_resnet.model import MATRIX, direct_loss_grad, gram_batch_loss_grad, gram_excess_grad
from tasks.linear_resnet.params import GDParams, SGDParams

THRESHOLDS: tuple[float, ...] = (1e-2, 1e-4, 1e-6)
CURVE_KEYS: tuple[str, ...] = ("step", "loss", "subopt", "rel_subopt", "best_loss", "grad_norm", "pl_ratio", "w_dist")


@dataclass
class Setup:
    """Everything a loop needs, already in the training dtype."""

    x: torch.Tensor
    y: torch.Tensor
    sigma: torch.Tensor
    phi: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    w0: list[torch.Tensor]
    eta: float
    loss_star: float
    loss0: float
    batch_gen: torch.Generator | None = None


@dataclass
class Trace:
    """Curve, first-hitting times of the relative suboptimality, best iterate."""

    loss_star: float
    gap0: float  # L0 - L*
    curve: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in CURVE_KEYS})
    # None until rel reaches eps: a threshold never reached is stored as null (issue 28)
    first: dict[float, int | None] = field(default_factory=lambda: dict.fromkeys(THRESHOLDS))
    rel_at_first: dict[float, float] = field(default_factory=dict)  # rel at the hitting step (rate fits)
    best_excess: float = math.inf
    last_step: int = 0
    last_excess: float = math.nan

    def rel(self, excess: float) -> float:
        return excess / self.gap0 if self.gap0 > 0 else 0.0

    def state(self) -> dict[str, Any]:
        """Plain data (thresholds in THRESHOLDS' order): what a checkpoint carries of the trace."""
        return {
            "curve": {k: list(v) for k, v in self.curve.items()},
            "first": [self.first[eps] for eps in THRESHOLDS],
            "rel_at_first": [self.rel_at_first.get(eps) for eps in THRESHOLDS],
            "best_excess": self.best_excess,
            "last_step": self.last_step,
            "last_excess": self.last_excess,
        }

    def restore(self, st: dict[str, Any]) -> None:
        self.curve = {k: list(v) for k, v in st["curve"].items()}
        self.first = dict(zip(THRESHOLDS, st["first"], strict=True))
        self.rel_at_first = {eps: r for eps, r in zip(THRESHOLDS, st["rel_at_first"], strict=True) if r is not None}
        self.best_excess, self.last_step, self.last_excess = st["best_excess"], st["last_step"], st["last_excess"]

    def observe(self, t: int, excess: float) -> float:
        rel = self.rel(excess)
        self.best_excess = min(self.best_excess, excess)
        self.last_step, self.last_excess = t, excess
        for eps, hit in self.first.items():
            if hit is None and rel <= eps:
                self.first[eps] = t
                self.rel_at_first[eps] = rel
        return rel

    def log(self, t: int, excess: float, sq: list[float], dist: float, depth: int) -> None:
        """One curve row from the layers' squared gradient norms and max_l ||W_l - W_l(0)||_F."""
        row = {
            "step": t,
            "loss": self.loss_star + excess,
            "subopt": excess,
            "rel_subopt": self.rel(excess),
            "best_loss": self.loss_star + self.best_excess,
            "grad_norm": math.sqrt(sum(sq)),
            # Lemma A.1's per-layer PL ratio min_l ||grad_l||^2 / (L - L*).
            "pl_ratio": min(sq) / excess if excess > 0 else math.nan,
            "w_dist": depth * dist,  # L max_l ||W_l - W_l(0)||_F: the proofs keep it <= 0.5
        }
        for key in CURVE_KEYS:
            self.curve[key].append(row[key])


@dataclass
class Outcome:
    status: str
    n_steps: int
    diverged_step: int | None
    flops: float
    trace: Trace
    ws: list[torch.Tensor]


class BatchSampler:
    """Indices of one minibatch per call; always B distinct samples (without replacement).

    independent: a fresh uniform B-subset every step, independent across steps (Algorithm 1, spec
    gotcha 14). reshuffle: one permutation per epoch cut into n/B consecutive batches, so every
    epoch visits each sample exactly once.
    """

    def __init__(self, n: int, batch: int, mode: str, gen: torch.Generator) -> None:
        self.n, self.batch, self.mode, self.gen = n, batch, mode, gen
        self.perm: torch.Tensor | None = None
        self.pos = 0

    def state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """The generator's state and the epoch's permutation (tensors), the position in it (plain data)."""
        tensors = {"gen.batches": self.gen.get_state()}
        if self.perm is not None:
            tensors["perm"] = self.perm.clone()
        return tensors, {"pos": self.pos}

    def restore(self, tensors: dict[str, torch.Tensor], state: dict[str, Any]) -> None:
        self.gen.set_state(tensors["gen.batches"].clone())
        self.perm = tensors["perm"].clone() if "perm" in tensors else None
        self.pos = state["pos"]

    def next(self) -> torch.Tensor:
        if self.mode == "independent":
            return torch.randperm(self.n, generator=self.gen)[: self.batch]
        if self.perm is None or self.pos + self.batch > self.n:
            self.perm, self.pos = torch.randperm(self.n, generator=self.gen), 0
        idx = self.perm[self.pos : self.pos + self.batch]
        self.pos += self.batch
        return idx


def _dims(p: GDParams | SGDParams) -> tuple[int, int, int, int, int, bool]:
    return p.m, p.d, p.k, p.depth, p.n, p.model == "resnet"


@dataclass
class Member:
    """One config's bookkeeping inside a (batched) loop: what its single run would hold in locals."""

    p: GDParams | SGDParams
    s: Setup
    ctx: RunContext
    trace: Trace
    total: F.Flops
    status: str = "ok"
    diverged_step: int | None = None
    t: int = 0
    ws: list[torch.Tensor] = field(default_factory=list)
    w_start: list[torch.Tensor] = field(default_factory=list)  # the weights the loop starts from
    sampler: BatchSampler | None = None  # SGD's minibatch order

    def checkpoint(self, t: int, ws: list[torch.Tensor]) -> Checkpoint:
        """The state before iteration `t`: W_t, the minibatch order, the trace of iterates < t and the flops."""
        tensors = {f"w.{layer}": w.to("cpu", copy=True) for layer, w in enumerate(ws)}
        state: dict[str, Any] = {"trace": self.trace.state(), "flops": [self.total.mm, self.total.ew]}
        if self.sampler is not None:
            more, state["sampler"] = self.sampler.state()
            tensors.update(more)
        return Checkpoint(t, tensors, state)

    def restore(self, ckpt: Checkpoint) -> None:
        self.w_start = [ckpt.tensors[f"w.{layer}"].to(self.s.w0[0].dtype) for layer in range(len(self.s.w0))]
        self.trace.restore(ckpt.state["trace"])
        self.total = F.Flops(*ckpt.state["flops"])
        if self.sampler is not None:
            self.sampler.restore(ckpt.tensors, ckpt.state["sampler"])

    def outcome(self) -> Outcome:
        return Outcome(self.status, self.t, self.diverged_step, self.total.total, self.trace, self.ws)


class Live:
    """The members still running and their tensors, stacked on a leading config axis on one device.

    A member that stops (diverged, pruned, timed out, converged or out of iterations) leaves the stack,
    keeping its own weights: the others go on without computing for it, so no NaN of a diverged member
    ever enters a kernel again.
    """

    def __init__(self, members: list[Member], device: str) -> None:
        self.members = members
        ss = [mb.s for mb in members]

        def stack(parts: list[torch.Tensor]) -> torch.Tensor:
            return torch.stack(parts).to(device)

        names = ("x", "y", "sigma", "phi", "a", "b")
        self.data: dict[str, torch.Tensor] = {name: stack([getattr(s, name) for s in ss]) for name in names}
        dtype = ss[0].x.dtype
        self.data["eta"] = torch.tensor([s.eta for s in ss], dtype=dtype, device=device)[:, None, None]
        self.w0 = [stack([s.w0[layer] for s in ss]) for layer in range(len(ss[0].w0))]
        self.ws = [
            stack([mb.w_start[layer] if mb.w_start else mb.s.w0[layer] for mb in members])
            for layer in range(len(self.w0))
        ]

    def stop(self, j: int, t: int, status: str, diverged_step: int | None = None) -> None:
        mb = self.members[j]
        mb.status, mb.diverged_step, mb.t = status, diverged_step, t
        mb.ws = [w[j].to("cpu", copy=True) for w in self.ws]

    def observe(self, j: int, t: int, excess: float, cost: F.Flops) -> float | None:
        """Member j's excess loss at iteration t, its evaluation costing `cost`: the member's relative
        suboptimality, or None when the loss diverged (the member then stops there)."""
        mb = self.members[j]
        mb.total = mb.total + cost
        if is_diverged(mb.s.loss_star + excess):
            self.stop(j, t, "diverged", t)
            return None
        return mb.trace.observe(t, excess)

    def drop(self, stopped: list[int], grads: list[torch.Tensor]) -> list[torch.Tensor]:
        """Remove the stopped members (indices into the current stack); returns the others' gradients."""
        if not stopped:
            return grads
        gone = set(stopped)
        keep = [j for j in range(len(self.members)) if j not in gone]
        idx = torch.tensor(keep, dtype=torch.long, device=self.ws[0].device)
        self.members = [self.members[j] for j in keep]
        self.data = {k: v[idx] for k, v in self.data.items()}
        self.w0 = [w[idx] for w in self.w0]
        self.ws = [w[idx] for w in self.ws]
        return [g[idx] for g in grads]

    def save(self, t: int) -> None:
        """Each member's `ctx.checkpoint` before iteration `t` (its last: `t == n_iters`, whose iterate is
        only evaluated); a member preempted there leaves the stack."""
        stopped = []
        for j, mb in enumerate(self.members):
            if mb.ctx.checkpointer is None:
                continue  # never saved (ctx.checkpoint would answer True): not even the views of its weights
            if not mb.ctx.checkpoint(t, partial(mb.checkpoint, t, [w[j] for w in self.ws]), last=t == mb.p.n_iters):
                self.stop(j, t, mb.ctx.stop_status())
                stopped.append(j)
        self.drop(stopped, [])

    def operands(self) -> tuple[list[torch.Tensor], dict[str, torch.Tensor]]:
        """Weights and data to compute with: the stacks, or a lone member's plain matrices (every single
        run: a batched matmul over a batch of one costs about twice a plain one at these sizes)."""
        if len(self.members) > 1:
            return self.ws, self.data
        return [w[0] for w in self.ws], {k: v[0] for k, v in self.data.items()}

    def stacked(self, out: tuple[torch.Tensor, list[torch.Tensor]]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """A (loss, gradients) pair with the member axis, whichever operands computed it."""
        if len(self.members) > 1:
            return out
        return out[0][None], [g[None] for g in out[1]]

    def log_stats(self, grads: list[torch.Tensor]) -> tuple[list[list[float]], list[float]]:
        """Per member: the layers' squared gradient norms and max_l ||W_l - W_l(0)||_F."""
        sq = torch.stack([(g * g).sum(dim=MATRIX) for g in grads], dim=1)
        dist = torch.stack([torch.linalg.matrix_norm(w - w0) for w, w0 in zip(self.ws, self.w0, strict=True)], 1)
        return sq.tolist(), dist.amax(dim=1).tolist()

    def update(self, grads: list[torch.Tensor], scale: float = 1.0) -> None:
        step = self.data["eta"] * scale if scale != 1.0 else self.data["eta"]
        for w, g in zip(self.ws, grads, strict=True):
            w.addcmul_(g, step, value=-1.0)  # W - eta G in one pass, each member with its own eta


def _members(ps: Sequence[GDParams | SGDParams], setups: Sequence[Setup], ctxs: Sequence[RunContext]) -> list[Member]:
    out = []
    for p, s, ctx in zip(ps, setups, ctxs, strict=True):
        m, d, k, depth, n, resnet = _dims(p)
        total = F.gram_setup(d, k, n) + F.initial_loss(m, d, k, depth, resnet)
        mb = Member(p, s, ctx, Trace(s.loss_star, s.loss0 - s.loss_star), total)
        if isinstance(p, SGDParams):
            assert s.batch_gen is not None
            mb.sampler = BatchSampler(p.n, p.batch_size, p.sampling, s.batch_gen)
        if ctx.resume is not None:
            mb.restore(ctx.resume)
        out.append(mb)
    return out


def start_step(ctxs: Sequence[RunContext]) -> int:
    """Where the loop starts: members of a batch resume from one step (tasks.resume_state.by_resume_step)."""
    return max(0 if ctx.resume is None else ctx.resume.step for ctx in ctxs)


def run_gd(ps: Sequence[GDParams], setups: Sequence[Setup], ctxs: Sequence[RunContext]) -> list[Outcome]:
    """GD for configs of one shape (`batch_key`), each as if it ran alone; one config is a batch of one."""
    members = _members(ps, setups, ctxs)
    p0 = ps[0]
    m, d, k, depth, n, resnet = _dims(p0)
    live = Live(members, ctxs[0].device)
    if p0.form == "direct":
        # A is fixed: cache A X once (spec §5), and phi X for the exact suboptimality.
        live.data["h0"] = live.data["a"] @ live.data["x"]
        live.data["phix"] = live.data["phi"] @ live.data["x"]
        for mb in members:
            if mb.ctx.resume is None:  # a checkpoint's flops count it already
                mb.total = mb.total + F.direct_setup(m, d, k, n)

    def evaluate() -> tuple[torch.Tensor, list[torch.Tensor]]:
        ws, t = live.operands()
        if p0.form == "gram":
            return live.stacked(gram_excess_grad(ws, t["a"], t["b"], t["sigma"], t["phi"], resnet))
        _, out, grads = direct_loss_grad(ws, t["h0"], t["b"], t["y"], resnet)
        diff = out - t["phix"]  # exact suboptimality 1/2 ||(U - phi) X||^2, no cancellation against L*
        return live.stacked((0.5 * (diff * diff).sum(dim=MATRIX), grads))

    eval_cost = F.gd_eval(m, d, k, depth, n, p0.form, resnet)
    log_cost = F.grad_norms(m, depth) + F.weight_distance(m, depth)
    start = start_step(ctxs)
    for t in range(start, max(p.n_iters for p in ps) + 1):
        excess_t, grads = evaluate()
        excesses = excess_t.tolist()
        stats: tuple[list[list[float]], list[float]] | None = None
        stopped: list[int] = []
        for j, mb in enumerate(live.members):
            excess = excesses[j]
            rel = live.observe(j, t, excess, eval_cost)
            if rel is None:
                stopped.append(j)
                continue
            last = t == mb.p.n_iters or (mb.p.stop_rel > 0 and rel <= mb.p.stop_rel)
            if t % mb.p.log_every == 0 or last:
                stats = stats or live.log_stats(grads)
                mb.trace.log(t, excess, stats[0][j], stats[1][j], len(grads))
                mb.total = mb.total + log_cost
                if not mb.ctx.report(t, loss=mb.s.loss_star + excess, rel_subopt=rel):
                    live.stop(j, t, mb.ctx.stop_status())
                    stopped.append(j)
                    continue
            if last:
                live.stop(j, t, "ok")
                stopped.append(j)
                continue
            mb.total = mb.total + F.update(m, depth)
        grads = live.drop(stopped, grads)
        if not live.members:
            break
        live.update(grads)
        live.save(t + 1)
        if not live.members:
            break
    return [mb.outcome() for mb in members]


def run_sgd(ps: Sequence[SGDParams], setups: Sequence[Setup], ctxs: Sequence[RunContext]) -> list[Outcome]:
    """SGD for configs of one shape (`batch_key`), each as if it ran alone: every member draws its
    minibatches from its own generator, in the order its single run would."""
    members = _members(ps, setups, ctxs)
    p0 = ps[0]
    m, d, k, depth, n, resnet = _dims(p0)
    bsz = p0.batch_size
    live = Live(members, ctxs[0].device)
    live.data["xt"], live.data["yt"] = live.data["x"].mT.contiguous(), live.data["y"].mT.contiguous()
    full_cost = F.gram_eval(m, d, k, depth, resnet) + F.grad_norms(m, depth) + F.weight_distance(m, depth)
    batch_cost = F.sgd_eval(m, d, k, depth, bsz, p0.form, resnet)
    for t in range(start_step(ctxs), max(p.n_iters for p in ps) + 1):
        stopped: list[int] = []
        if any(t % mb.p.log_every == 0 or t == mb.p.n_iters for mb in live.members):
            # Every member is evaluated when one logs (one batched pass); only the loggers use it.
            ws, tt = live.operands()
            excess_t, grads = live.stacked(gram_excess_grad(ws, tt["a"], tt["b"], tt["sigma"], tt["phi"], resnet))
            excesses = excess_t.tolist()
            stats: tuple[list[list[float]], list[float]] | None = None
            for j, mb in enumerate(live.members):
                if not (t % mb.p.log_every == 0 or t == mb.p.n_iters):
                    continue
                excess = excesses[j]
                rel = live.observe(j, t, excess, full_cost)
                if rel is None:
                    stopped.append(j)
                    continue
                stats = stats or live.log_stats(grads)
                mb.trace.log(t, excess, stats[0][j], stats[1][j], len(grads))
                if not mb.ctx.report(t, loss=mb.s.loss_star + excess, rel_subopt=rel):
                    live.stop(j, t, mb.ctx.stop_status())
                    stopped.append(j)
                    continue
                if mb.p.stop_rel > 0 and rel <= mb.p.stop_rel:
                    live.stop(j, t, "ok")
                    stopped.append(j)
        for j, mb in enumerate(live.members):
            if t == mb.p.n_iters and j not in stopped:
                live.stop(j, t, "ok")
                stopped.append(j)
        live.drop(stopped, [])
        if not live.members:
            break
        idx = torch.stack([_sampler(mb).next() for mb in live.members]).to(live.ws[0].device)
        rows = torch.arange(len(live.members), device=idx.device)[:, None]
        # Gathering whole sample rows of the (B, n, d) transposes is a plain copy per sample.
        xb, yb = live.data["xt"][rows, idx].mT, live.data["yt"][rows, idx].mT
        ws, tt = live.operands()
        if len(live.members) == 1:
            xb, yb = xb[0], yb[0]
        if p0.form == "gram":
            batch_loss, grads = live.stacked(gram_batch_loss_grad(ws, tt["a"], tt["b"], xb, yb, resnet))
        else:
            batch_loss, _, grads = direct_loss_grad(ws, tt["a"] @ xb, tt["b"], yb, resnet)
            batch_loss, grads = live.stacked((batch_loss, grads))
        stopped = []
        for j, (mb, value) in enumerate(zip(live.members, batch_loss.tolist(), strict=True)):
            mb.total = mb.total + batch_cost
            if is_diverged(value * n / bsz):
                live.stop(j, t, "diverged", t)
                stopped.append(j)
            else:
                mb.total = mb.total + F.update(m, depth)
        grads = live.drop(stopped, grads)
        if not live.members:
            break
        live.update(grads, n / bsz)  # G = (n/B) sum_batch grad l_i: unbiased for the SUM loss (spec §1.5)
        live.save(t + 1)
        if not live.members:
            break
    return [mb.outcome() for mb in members]


def _sampler(mb: Member) -> BatchSampler:
    assert mb.sampler is not None
    return mb.sampler
