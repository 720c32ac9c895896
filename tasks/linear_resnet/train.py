"""Algorithm 1 of paper 003: GD and minibatch SGD from a fixed starting point, with the metrics the
theorems speak about (suboptimality L - L*, its ratio to L0 - L*, gradient norms, distance from init).

GD evaluates the full loss at every iterate (it comes with the gradient), so its thresholds are exact.
SGD evaluates the full loss only every `log_every` steps (an extra Gram pass, counted in the flops),
so its thresholds and best iterate have that resolution; divergence is checked on every batch loss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from tasks.base import RunContext, is_diverged
from tasks.linear_resnet import flops as F
from tasks.linear_resnet.model import direct_loss_grad, gram_batch_loss_grad, gram_excess_grad
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
    first: dict[float, int] = field(default_factory=lambda: {eps: -1 for eps in THRESHOLDS})
    rel_at_first: dict[float, float] = field(default_factory=dict)  # rel at the hitting step (rate fits)
    best_excess: float = math.inf
    last_step: int = 0
    last_excess: float = math.nan

    def rel(self, excess: float) -> float:
        return excess / self.gap0 if self.gap0 > 0 else 0.0

    def observe(self, t: int, excess: float) -> float:
        rel = self.rel(excess)
        self.best_excess = min(self.best_excess, excess)
        self.last_step, self.last_excess = t, excess
        for eps, hit in self.first.items():
            if hit < 0 and rel <= eps:
                self.first[eps] = t
                self.rel_at_first[eps] = rel
        return rel

    def log(
        self, t: int, excess: float, grads: list[torch.Tensor], ws: list[torch.Tensor], w0: list[torch.Tensor]
    ) -> None:
        sq = [float((g * g).sum()) for g in grads]
        dist = max(float(torch.linalg.matrix_norm(w - w_init)) for w, w_init in zip(ws, w0, strict=True))
        row = {
            "step": t,
            "loss": self.loss_star + excess,
            "subopt": excess,
            "rel_subopt": self.rel(excess),
            "best_loss": self.loss_star + self.best_excess,
            "grad_norm": math.sqrt(sum(sq)),
            # Lemma A.1's per-layer PL ratio min_l ||grad_l||^2 / (L - L*).
            "pl_ratio": min(sq) / excess if excess > 0 else math.nan,
            "w_dist": len(ws) * dist,  # L max_l ||W_l - W_l(0)||_F: the proofs keep it <= 0.5
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


def run_gd(p: GDParams, s: Setup, ctx: RunContext) -> Outcome:
    m, d, k, depth, n, resnet = _dims(p)
    ws = [w.clone() for w in s.w0]
    total = F.gram_setup(d, k, n) + F.initial_loss(m, d, k, depth, resnet)
    if p.form == "gram":

        def evaluate(ws: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
            return gram_excess_grad(ws, s.a, s.b, s.sigma, s.phi, resnet)
    else:
        h0 = s.a @ s.x  # A is fixed: cache A X once (spec §5)
        phix = s.phi @ s.x
        total = total + F.direct_setup(m, d, k, n)

        def evaluate(ws: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
            _, out, grads = direct_loss_grad(ws, h0, s.b, s.y, resnet)
            diff = out - phix  # exact suboptimality 1/2 ||(U - phi) X||^2, no cancellation against L*
            return 0.5 * (diff * diff).sum(), grads

    eval_cost = F.gd_eval(m, d, k, depth, n, p.form, resnet)
    log_cost = F.grad_norms(m, depth) + F.weight_distance(m, depth)
    trace = Trace(s.loss_star, s.loss0 - s.loss_star)
    status, diverged_step, t = "ok", None, 0
    for t in range(p.n_iters + 1):
        excess_t, grads = evaluate(ws)
        total = total + eval_cost
        excess = float(excess_t)
        if is_diverged(s.loss_star + excess):
            status, diverged_step = "diverged", t
            break
        rel = trace.observe(t, excess)
        last = t == p.n_iters or (p.stop_rel > 0 and rel <= p.stop_rel)
        if t % p.log_every == 0 or last:
            trace.log(t, excess, grads, ws, s.w0)
            total = total + log_cost
            if not ctx.report(t, loss=s.loss_star + excess, rel_subopt=rel):
                status = ctx.stop_status()
                break
        if last:
            break
        for w, g in zip(ws, grads, strict=True):
            w.sub_(g, alpha=s.eta)
        total = total + F.update(m, depth)
    return Outcome(status, t, diverged_step, total.total, trace, ws)


def run_sgd(p: SGDParams, s: Setup, ctx: RunContext) -> Outcome:
    m, d, k, depth, n, resnet = _dims(p)
    bsz = p.batch_size
    assert s.batch_gen is not None
    sampler = BatchSampler(n, bsz, p.sampling, s.batch_gen)
    step = s.eta * n / bsz  # G = (n/B) sum_batch grad l_i: unbiased for the SUM loss (spec §1.5)
    ws = [w.clone() for w in s.w0]
    total = F.gram_setup(d, k, n) + F.initial_loss(m, d, k, depth, resnet)
    full_cost = F.gram_eval(m, d, k, depth, resnet) + F.grad_norms(m, depth) + F.weight_distance(m, depth)
    batch_cost = F.sgd_eval(m, d, k, depth, bsz, p.form, resnet)
    trace = Trace(s.loss_star, s.loss0 - s.loss_star)
    status, diverged_step, t = "ok", None, 0
    for t in range(p.n_iters + 1):
        if t % p.log_every == 0 or t == p.n_iters:
            excess_t, grads = gram_excess_grad(ws, s.a, s.b, s.sigma, s.phi, resnet)
            total = total + full_cost
            excess = float(excess_t)
            if is_diverged(s.loss_star + excess):
                status, diverged_step = "diverged", t
                break
            rel = trace.observe(t, excess)
            trace.log(t, excess, grads, ws, s.w0)
            if not ctx.report(t, loss=s.loss_star + excess, rel_subopt=rel):
                status = ctx.stop_status()
                break
            if p.stop_rel > 0 and rel <= p.stop_rel:
                break
        if t == p.n_iters:
            break
        idx = sampler.next()
        xb, yb = s.x[:, idx], s.y[:, idx]
        if p.form == "gram":
            batch_loss, grads = gram_batch_loss_grad(ws, s.a, s.b, xb, yb, resnet)
        else:
            batch_loss, _, grads = direct_loss_grad(ws, s.a @ xb, s.b, yb, resnet)
        total = total + batch_cost
        if is_diverged(float(batch_loss) * n / bsz):
            status, diverged_step = "diverged", t
            break
        for w, g in zip(ws, grads, strict=True):
            w.sub_(g, alpha=step)
        total = total + F.update(m, depth)
    return Outcome(status, t, diverged_step, total.total, trace, ws)
