"""Algorithms 2-3: the D-SVD forward pass, its training, and Table 3's metrics.

Training follows Algorithm 3: per outer iteration, in the forward pass, each layer's inner LD-Minv
(one coefficient set for U and one for V) is trained by Algorithm 1 for `inner_iters` steps on that
layer's matrices I + t P / 2 (detached), then the Cayley update is taken; after the pass one (S)GD
step is taken on the per-layer step offsets on M_n = 1/(n K) sum_i sum_k f(U_ik, V_ik).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from tasks.base import Checkpoint, RunContext, is_diverged
from tasks.common import generator, torch_dtype
from tasks.ldminv import dsvd as D
from tasks.ldminv import matrix_path as MP
from tasks.ldminv.coefficients import initial_coefficients
from tasks.ldminv.data import DataSpec, Source
from tasks.ldminv.engine import eq4, over_members
from tasks.ldminv.flops import minv_forward_flops
from tasks.ldminv.params import DsvdParams
from tasks.ldminv.run_books import RunBooks
from tasks.ldminv.train_minv import MinvOutcome
from tasks.resume_state import load_optimizer, optimizer_tensors
from tasks.status import PREEMPTED


class DsvdModel:
    """One config's D-SVD: its step offsets (a leaf of its own), inner coefficients and diagnostics."""

    def __init__(self, p: DsvdParams, device: str) -> None:
        self.p = p
        self.dtype = torch_dtype(p.dtype)
        self.device = device
        self.r = p.r or min(p.m, p.n_hat)
        self.inv = D.Inverse(p.inverse, p.L_inv)
        self.offsets = torch.zeros(p.K_svd, 2, dtype=self.dtype, device=device, requires_grad=True)
        seed = p.seed if p.init_seed is None else p.init_seed
        layers = []
        for k in range(p.K_svd):
            for side in range(2):
                c = initial_coefficients(
                    "hyperpower",
                    p.K_inv,
                    p.L_inv,
                    p.coeff_init,
                    seed + 7919 * (2 * k + side),
                    scale=1.0 / 16,
                    alpha=1.0,
                )
                layers.append(c)
        # a list per (layer, side): inner training replaces an entry, never edits a tensor in the graph
        self.coeffs = [[layers[2 * k + s].to(self.dtype).to(device) for s in range(2)] for k in range(p.K_svd)]
        self.first_layer_neg: list[float] = []


class Models:
    """Configs of one batch key run through each D-SVD layer together: their tensors stacked on a
    leading member axis and every Cayley half step and inner LD-Minv loss mapped over it with
    `torch.func.vmap`, so each member computes exactly what its single run computes."""

    def __init__(self, models: Sequence[DsvdModel]) -> None:
        self.models = list(models)
        p = models[0].p  # sizes, inverse, step rule and inner_iters are part of the batch key
        self.p, self.inv = p, models[0].inv

        def half(
            m: torch.Tensor, u: torch.Tensor, v: torch.Tensor, offset: torch.Tensor, coeffs: torch.Tensor | None
        ) -> tuple[torch.Tensor, ...]:
            out, data = D.half_step(m, u, v, offset, coeffs, self.inv, p.step_rule)
            return out, data.a, data.c0, data.t_rule

        # The exact inverse has no coefficients: vmap maps tensors only, so it gets its own mapped function.
        self.half_exact = over_members(lambda m, u, v, offset: half(m, u, v, offset, None))

        def inner_loss(a: torch.Tensor, x0: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
            return eq4([MP.residual_sq(a, x) for x in MP.ldminv(a, x0, c, "hyperpower", p.L_inv)])

        self.half = over_members(half)
        self.inner_loss = over_members(inner_loss)

    def step(
        self, m: torch.Tensor, u: torch.Tensor, v: torch.Tensor, offset: torch.Tensor, k: int, side: int
    ) -> tuple[torch.Tensor, ...]:
        """Layer k's half step on `side` for every member: the new U (or V), I + tP/2, c0 and the rule's t."""
        if self.inv.kind != "ldminv":
            return self.half_exact(m, u, v, offset)
        return self.half(m, u, v, offset, torch.stack([model.coeffs[k][side] for model in self.models]))

    def train_inner(self, k: int, side: int, a: torch.Tensor, c0: torch.Tensor) -> None:
        """Algorithm 1 on each member's I + tP/2 for inner_iters steps (SGD at its inner_lr). A member whose
        inner loss turns non-finite stops there and keeps its coefficients from before, as alone."""
        cs = [model.coeffs[k][side].clone().requires_grad_(True) for model in self.models]
        opt = torch.optim.SGD(
            [{"params": [c], "lr": model.p.inner_lr} for c, model in zip(cs, self.models, strict=True)]
        )
        x0 = a.transpose(-2, -1) / c0[..., None, None]
        live = list(range(len(cs)))
        for _ in range(self.p.inner_iters):
            if not live:
                break
            opt.zero_grad()
            loss = self.inner_loss(a[live], x0[live], torch.stack([cs[i] for i in live]))
            finite = [j for j, v in enumerate(loss.detach().tolist()) if math.isfinite(v)]
            loss[finite].sum().backward()
            for j in set(range(len(live))) - set(finite):
                cs[live[j]].grad = None
            live = [live[j] for j in finite]
            opt.step()
        for i in live:
            self.models[i].coeffs[k][side] = cs[i].detach()

    def forward(
        self, m: torch.Tensor, u: torch.Tensor, v: torch.Tensor, depth: int, train_inner: bool = False
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """f per layer (list of (members, n)), and the final U, V (members first)."""
        fs = []
        mt = m.transpose(-2, -1)
        offsets = torch.stack([model.offsets for model in self.models])
        train = train_inner and self.p.inner_iters > 0 and self.inv.kind == "ldminv"
        for k in range(depth):
            for side in range(2):
                mm, a, b = (m, u, v) if side == 0 else (mt, v, u)
                if train:
                    _, data_a, c0, _ = self.step(mm, a, b, offsets[:, k, side].detach(), k, side)
                    self.train_inner(k, side, data_a, c0)
                new, _, _, t_rule = self.step(mm, a, b, offsets[:, k, side], k, side)
                if side == 0:
                    u = new
                    if k == 0:
                        for model, t in zip(self.models, t_rule, strict=True):
                            model.first_layer_neg.append(float((t < 0).to(torch.float64).mean()))
                else:
                    v = new
            fs.append(over_members(D.objective)(m, u, v))
        return fs, u, v


def _draw(p: DsvdParams, seed: int, split: str, n: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    spec = DataSpec("gauss", p.m, p.n_hat, None, p.entry_scale, None)
    m = Source(spec, seed, split).matrices(n)
    r = p.r or min(p.m, p.n_hat)
    g = generator(seed, "ldminv", split, "stiefel")
    u0, v0 = D.stiefel_init(n, p.m, r, g), D.stiefel_init(n, p.n_hat, r, g)
    sigma_sum = torch.linalg.svdvals(m)[..., :r].sum(-1).mean()
    return tuple(t.to(dtype).to(device) for t in (m, u0, v0, sigma_sum))


def evaluate(models: Sequence[DsvdModel], tests: Sequence[tuple[torch.Tensor, ...]]) -> list[dict[str, float]]:
    """Table 3's metrics of each model on its own test set."""
    m, u0, v0, sigma_sum = (torch.stack(parts) for parts in zip(*tests, strict=True))
    with torch.no_grad():
        fs, u, v = Models(models).forward(m, u0, v0, models[0].p.K_svd)
        mse, orth = over_members(D.svd_errors)(m, u, v)
    out = []
    for i, model in enumerate(models):
        obj = float(fs[-1][i].mean())
        out.append(
            {
                "test_obj": obj,
                "test_loss": obj + float(sigma_sum[i]),
                "svd_mse_sum": float(mse[i].mean()),
                "svd_mse_mean": float(mse[i].mean()) / model.r,
                "orth_err": float(orth[i].max()),
            }
        )
    return out


@dataclass(eq=False)  # members are told apart by identity (they hold tensors)
class Member(RunBooks):
    """One config's run state inside a batch (what its single run holds in locals)."""

    p: DsvdParams
    ctx: RunContext
    model: DsvdModel
    test: tuple[torch.Tensor, ...]
    init: dict[str, float] = field(default_factory=dict)
    curve: dict[str, list[Any]] = field(default_factory=dict)
    status: str = "ok"
    diverged_step: int | None = None
    steps: int = 0
    stopped: bool = False
    pool: tuple[torch.Tensor, ...] = ()
    bg: torch.Generator | None = None

    def checkpoint(self, it: int, opt: torch.optim.Optimizer | None) -> Checkpoint:
        """The state after iteration `it`: step offsets, inner coefficients, optimiser state, batch order,
        the init's metrics and the curve (the pool and test set are re-drawn from their seeds)."""
        model = self.model
        tensors = {"offsets": model.offsets.detach().to("cpu", copy=True)}
        tensors.update(
            {
                f"coeffs.{k}.{s}": c.to("cpu", copy=True)
                for k, pair in enumerate(model.coeffs)
                for s, c in enumerate(pair)
            }
        )
        if self.bg is not None:
            tensors["gen.batches"] = self.bg.get_state()
        if opt is not None:
            tensors.update(optimizer_tensors(opt, [model.offsets], "opt."))
        state = {
            "init": dict(self.init),
            "neg_step_frac": model.first_layer_neg[0],
            "curve": {k: list(v) for k, v in self.curve.items()},
        }
        return Checkpoint(it, tensors, state)

    def restore(self, ckpt: Checkpoint) -> None:
        """Start from `ckpt` (its optimiser state: `load_optimizer`, once the optimiser exists). The curve keeps
        the rows this config logs: a shorter run's row at its own last iteration goes (budget growth)."""
        st, model = ckpt.state, self.model
        with torch.no_grad():
            model.offsets.copy_(ckpt.tensors["offsets"])
        for k, pair in enumerate(model.coeffs):
            for s in range(len(pair)):
                pair[s] = ckpt.tensors[f"coeffs.{k}.{s}"].to(self.ctx.device, copy=True)
        model.first_layer_neg = [st["neg_step_frac"]]
        self.init = dict(st["init"])
        keep = [j for j, it in enumerate(st["curve"]["step"]) if self.logs(it)]
        self.curve = {k: [v[j] for j in keep] for k, v in st["curve"].items()}
        self.steps = ckpt.step

    def log(self, it: int, value: float, tl: float) -> bool:
        """A curve row at a logged step; False when the member stops here."""
        self.curve["step"].append(it)
        self.curve["train_loss"].append(value + float(self.pool[3]))
        self.curve["test_loss"].append(tl)
        return self.reported(it, value, tl) and it < self.p.iters


def run_dsvd(p: DsvdParams, ctx: RunContext) -> MinvOutcome:
    return run_dsvd_batch([p], [ctx])[0]


def run_dsvd_batch(ps: Sequence[DsvdParams], ctxs: Sequence[RunContext]) -> list[MinvOutcome]:
    """D-SVD for configs of one batch key, each as if it ran alone (one config: a batch of one): own
    data, batch order, offsets and optimiser state (a param group each); stops at its own step."""
    members = []
    for p, ctx in zip(ps, ctxs, strict=True):
        data_seed = p.seed if p.data_seed is None else p.data_seed
        test = _draw(p, data_seed, "test", p.n_test, torch_dtype(p.dtype), ctx.device)
        members.append(Member(p, ctx, DsvdModel(p, ctx.device), test))
    # Members of a batch resume from one step (tasks.resume_state.by_resume_step; a checkpoint of step 0 with
    # members starting afresh).
    resumes = [ctx.resume for ctx in ctxs]
    done = max(0 if ckpt is None else ckpt.step for ckpt in resumes)
    fresh = [mb for mb, ckpt in zip(members, resumes, strict=True) if ckpt is None]
    inits = evaluate([mb.model for mb in fresh], [mb.test for mb in fresh]) if fresh else []
    for mb, init in zip(fresh, inits, strict=True):
        mb.init = init
        mb.curve = {"step": [0], "train_loss": [math.nan], "test_loss": [init["test_loss"]]}
        if is_diverged(init["test_loss"]):
            mb.status, mb.diverged_step = "diverged", 1
        mb.stopped = not mb.ctx.report(0, test_loss=init["test_loss"])
    for mb, ckpt in zip(members, resumes, strict=True):
        if ckpt is not None:
            mb.restore(ckpt)
    live = [mb for mb in members if mb.steps < mb.p.iters and mb.status == "ok" and not mb.stopped]
    for mb in live:
        data_seed = mb.p.seed if mb.p.data_seed is None else mb.p.data_seed
        mb.pool = _draw(mb.p, data_seed, "train", mb.p.n_train, torch_dtype(mb.p.dtype), mb.ctx.device)
        mb.bg = generator(mb.p.seed if mb.p.init_seed is None else mb.p.init_seed, "ldminv", "dsvd_batches")
    groups = [{"params": [mb.model.offsets], "lr": mb.p.lr} for mb in live]
    opt = None if not live else (torch.optim.Adam if ps[0].optimizer == "adam" else torch.optim.SGD)(groups)
    for mb, ckpt in zip(members, resumes, strict=True):
        if ckpt is None:
            if mb.status == "ok" and not mb.stopped:
                mb.save(0, opt, last=mb.p.iters == 0)
        elif mb in live:
            assert mb.bg is not None and opt is not None
            if "gen.batches" in ckpt.tensors:  # absent at step 0 of a run of no iterations: a fresh order
                mb.bg.set_state(ckpt.tensors["gen.batches"].clone())
            load_optimizer(opt, [mb.model.offsets], ckpt.tensors, "opt.")
    live = [mb for mb in live if not mb.stopped]
    for it in range(done + 1, max(p.iters for p in ps) + 1):
        if not live or opt is None:
            break
        idx = [torch.randperm(mb.p.n_train, generator=mb.bg)[: mb.p.batch].to(mb.ctx.device) for mb in live]
        batch = [torch.stack([mb.pool[part][i] for mb, i in zip(live, idx, strict=True)]) for part in range(3)]
        opt.zero_grad()
        fs, _, _ = Models([mb.model for mb in live]).forward(
            batch[0], batch[1], batch[2], ps[0].K_svd, train_inner=True
        )
        loss = over_members(lambda *f: torch.stack([x.mean() for x in f]).mean())(*fs)
        values = loss.detach().tolist()
        running = [j for j, v in enumerate(values) if not is_diverged(v)]
        for j in set(range(len(live))) - set(running):
            live[j].status, live[j].diverged_step = "diverged", it
        loss[running].sum().backward()
        for j in set(range(len(live))) - set(running):
            live[j].model.offsets.grad = None
        opt.step()
        stepping = [live[j] for j in running]
        for mb in stepping:
            mb.steps = it
        logging = [mb for mb in stepping if mb.logs(it)]
        tls = evaluate([mb.model for mb in logging], [mb.test for mb in logging]) if logging else []
        going = {
            id(mb) for mb, tl in zip(logging, tls, strict=True) if mb.log(it, values[live.index(mb)], tl["test_loss"])
        }
        live = []
        for mb in stepping:
            more = id(mb) in going or (mb not in logging and it < mb.p.iters)
            if mb.status == "ok" and not mb.stopped and mb.save(it, opt, last=not more) and more:
                live.append(mb)
    finals = [mb for mb in members if mb.steps]  # a member that never stepped reports its init
    metrics = evaluate([mb.model for mb in finals], [mb.test for mb in finals]) if finals else []
    final_metrics = {id(mb): m for mb, m in zip(finals, metrics, strict=True)}
    return [_outcome(mb, final_metrics.get(id(mb), mb.init)) for mb in members]


def _outcome(mb: Member, final: dict[str, float]) -> MinvOutcome:
    p, model = mb.p, mb.model
    if mb.stopped:
        mb.status = mb.ctx.stop_status()
    if mb.status == PREEMPTED:  # saved: the runner stores nothing of this attempt
        return MinvOutcome(PREEMPTED, {})
    dev = max(float((c - 1.0).abs().max()) for pair in model.coeffs for c in pair)
    summary: dict[str, Any] = {
        **final,
        "test_loss_init": mb.init["test_loss"],
        "svd_mse_sum_init": mb.init["svd_mse_sum"],
        "neg_step_frac": model.first_layer_neg[0],
        "t_offsets_json": json.dumps([round(float(t), 12) for t in model.offsets.detach().flatten()]),
        "max_abs_c_dev": dev,
        "diverged": mb.status == "diverged",
    }
    steps = mb.steps
    per_layer = layer_flops(p)
    flops = per_layer * p.K_svd * (p.n_test * (2 + (1 if steps else 0)) + 3 * p.batch * steps)
    return MinvOutcome(mb.status, summary, mb.curve, max(steps, p.K_svd), mb.diverged_step, flops)


def layer_flops(p: DsvdParams) -> float:
    """One D-SVD layer per sample (spec section 5): the two inner LD-Minvs dominate."""
    r = p.r or min(p.m, p.n_hat)
    g = 2.0 * p.m * p.n_hat * r
    return (
        minv_forward_flops(p.m, p.m, p.K_inv, p.L_inv)
        + minv_forward_flops(p.n_hat, p.n_hat, p.K_inv, p.L_inv)
        + 8 * g
        + 4.0 * (p.m**2 + p.n_hat**2) * r
    )
