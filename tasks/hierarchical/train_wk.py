"""Training of the K/W learner (spec 2.9): minibatch Adam or SGD+momentum on
mean (F~ - y)^2 + sum_l [lam3 T3 + lam4 T4 + lam5 T5] + lam6 (||K||^2 + ||W||^2) over the phases of
`schedule.phases`, with per-stage evaluation (normalised MSE, feature errors, regulariser gaps)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from tasks import base
from tasks.base import Checkpoint, RunContext, is_diverged
from tasks.common import generator, torch_dtype
from tasks.hierarchical import flops as FL
from tasks.hierarchical.data import Data
from tasks.hierarchical.metrics import (
    fe_lin,
    fe_orth,
    gram_change,
    median_se,
    nmse,
    row_cosine,
)
from tasks.hierarchical.params import MAX_L, WKParams
from tasks.hierarchical.schedule import Phase, phases, position
from tasks.hierarchical.target import Target
from tasks.hierarchical.wk_model import (
    WKNet,
    distill_terms,
    forward,
    initial_distill,
    output,
    q_dim,
    reg_gap,
)
from tasks.resume_state import load_optimizer, optimizer_tensors
from tasks.status import DIVERGED, OK, Status

LAYERS = range(2, MAX_L + 1)
CURVE_COLUMNS = [
    "phase",
    "top",
    "loss",
    "test_mse",
    "train_mse",
    "val_mse",
    "test_mse_trunc",
    "flops",
    *[f"fe_orth_l{i}" for i in LAYERS],
    *[f"fe_lin_l{i}" for i in LAYERS],
    *[f"reg_gap_l{i}" for i in LAYERS],
]


def init_net(p: WKParams, target: Target, mean_sq: torch.Tensor, device: str) -> WKNet:
    """R_j ~ N(0, 1/k_j^2) entries (fixed), W_{l,j} ~ N(0, w_init^2/q_j), K_l = 0 (distill) or
    N(0, k_init^2/q_j) (random). Each tensor has its own stream keyed on init_seed."""
    dt = torch_dtype(p.dtype)
    ks, d, seed = target.ks, target.d, p.iseed()
    r = {}
    for j in range(2, p.L + 1):
        g = generator(seed, "hierarchical", "R", j)
        r[j] = (torch.randn(q_dim(j, d, ks), ks[j - 2], generator=g, dtype=torch.float64) / ks[j - 2]).to(dt)
    kd, wd = {}, {}
    for layer in range(2, p.L + 1):
        gw = generator(seed, "hierarchical", "W", layer)
        gk = generator(seed, "hierarchical", "K", layer)
        wcols, kcols = [], []
        for j in target.graph[layer]:
            q = q_dim(j, d, ks)
            wcols.append(torch.randn(p.m, q, generator=gw, dtype=torch.float64) * (p.w_init / math.sqrt(q)))
            kb = torch.randn(ks[layer - 2], q, generator=gk, dtype=torch.float64) * (p.k_init / math.sqrt(q))
            kcols.append(kb if p.k_start == "random" else torch.zeros_like(kb))
        wd[layer] = torch.cat(wcols, dim=1).to(dt)
        kd[layer] = torch.cat(kcols, dim=1).to(dt)
    trunc = None
    if p.trunc_b is not None:
        # B_j = trunc_b x RMS of R_j S*_j, with E||S*_j||^2 = k_j spread evenly: ||R_j||_F / sqrt(q_j).
        trunc = {j: p.trunc_b * float(r[j].double().norm()) / math.sqrt(r[j].shape[0]) for j in r}
    alphas = [target.alpha_eff(layer) for layer in range(2, p.L + 1)]
    net = WKNet(d, ks, p.m, target.graph, alphas, r, kd, wd, mean_sq.to(dt), trunc)
    for t in [*net.r.values(), *net.tensors(), net.mean_sq]:
        t.data = t.data.to(device)
    return net


@dataclass(kw_only=True)
class Outcome(base.Outcome):
    """A training's end with the trained net and the weight snapshots the correction checks read."""

    net: WKNet
    snapshots: dict[str, dict[int, torch.Tensor]] = field(default_factory=dict)


PHASE_CODES = {"D": 0, "N": 1, "final": 2, "all": 3}


def phase_code(name: str, initial: bool = False) -> int:
    """Curve column `phase`: -1 before training, 0 = stage l^Delta, 1 = l^Nabla (l is `top`),
    2 = the final phase, 3 = the all-from-start phase (numeric: curve columns are compared as floats)."""
    if initial:
        return -1
    return PHASE_CODES[name] if name in PHASE_CODES else PHASE_CODES[name[-1]]


class Trainer:
    def __init__(self, p: WKParams, target: Target, data: Data, ctx: RunContext) -> None:
        self.p, self.target, self.ctx = p, target, ctx
        self.dt = torch_dtype(p.dtype)
        dev = ctx.device
        self.xtr = data.train.x.to(dev, self.dt)
        self.ytr = data.train.y.to(dev, self.dt)
        self.data = data
        self.dev = dev
        mean_sq = (data.train.x**2).mean(0)  # footnote 8: the learner only knows the empirical E[x∘x]
        self.net = init_net(p, target, mean_sq, dev)
        self.curve: dict[str, list[Any]] = {"step": [], **{c: [] for c in CURVE_COLUMNS}}
        self.summary: dict[str, Any] = {}
        self.flops = 0.0
        self.steps = 0
        self.epochs = 0
        self.snap: dict[str, dict[int, torch.Tensor]] = {
            "init_w": {l: w.detach().clone() for l, w in self.net.w.items()}
        }
        self.lams = [p.lam_mult * r for r in p.lam_ratios]

    # -------------------------------------------------------------------------------- objective
    def regulariser(self, phase: Phase) -> torch.Tensor:
        total = torch.zeros((), dtype=self.dt, device=self.dev)
        for layer in range(2, phase.top + 1):
            trains = layer in phase.train_w or layer in phase.train_k
            if not trains:
                continue  # frozen: its terms have no gradient and do not change the update
            if layer in phase.reg_layers and any(self.lams):
                a2 = self.net.alphas[layer - 2] ** 2
                t3, t4, t5 = distill_terms(self.net, layer)
                total = total + a2 * (self.lams[0] * t3 + self.lams[1] * t4 + self.lams[2] * t5)
            if self.p.wd:
                if layer in phase.train_w:
                    total = total + self.p.wd * (self.net.w[layer] ** 2).sum()
                if layer in phase.train_k:
                    total = total + self.p.wd * (self.net.k[layer] ** 2).sum()
        return total

    def step_flops(self, phase: Phase) -> float:
        net, p = self.net, self.p
        per = 3.0 * p.batch * FL.wk_forward(net.d, net.ks, p.m, net.graph, phase.top)
        for layer in range(2, phase.top + 1):
            if layer in phase.reg_layers and (layer in phase.train_w or layer in phase.train_k):
                per += 3.0 * FL.wk_reg(net.d, net.ks, p.m, net.graph, layer)
        return per

    # -------------------------------------------------------------------------------- evaluation
    def evaluate(self, phase: Phase, loss: float, initial: bool = False) -> dict[str, Any]:
        net, depth = self.net, self.p.L
        row: dict[str, Any] = {"phase": phase_code(phase.name, initial), "top": phase.top, "loss": loss}
        with torch.no_grad():
            splits = {"test": self.data.test, "train": self.data.train, "val": self.data.val}
            for name, split in splits.items():
                x = split.x.to(self.dev, self.dt)
                pred = output(net, x, phase.top)
                row[f"{name}_mse"] = nmse(pred.cpu(), split.y)
                self.flops += x.shape[0] * FL.wk_forward(net.d, net.ks, net.m, net.graph, phase.top)
                if name == "test":
                    row["test_median_se"] = median_se(pred.cpu(), split.y)
                    if net.trunc is not None:
                        ptr = output(net, x, phase.top, truncated=True).cpu()
                        row["test_mse_trunc"] = nmse(ptr, split.y)
                        row["trunc_gap"] = float(((ptr - pred.cpu()).double() ** 2).mean() / split.y.var())
                    else:
                        row["test_mse_trunc"] = math.nan
                        row["trunc_gap"] = math.nan
                    _, feats = forward(net, x, depth)
                    for layer in LAYERS:
                        if layer <= depth:
                            s_true, s = split.feats[layer], feats[layer - 2].cpu()
                            row[f"fe_orth_l{layer}"] = fe_orth(s_true, s)
                            row[f"fe_lin_l{layer}"] = fe_lin(s_true, s)
                            row[f"reg_gap_l{layer}"] = reg_gap(net, layer)
                        else:
                            row[f"fe_orth_l{layer}"] = row[f"fe_lin_l{layer}"] = row[f"reg_gap_l{layer}"] = math.nan
        row["flops"] = self.flops
        return row

    def record(self, phase: Phase, loss: float, initial: bool = False) -> dict[str, Any]:
        row = self.evaluate(phase, loss, initial)
        self.curve["step"].append(self.epochs)
        for c in CURVE_COLUMNS:
            self.curve[c].append(row[c])
        return row

    # -------------------------------------------------------------------------------- training
    def optimiser(self, params: list[torch.Tensor], lr: float) -> torch.optim.Optimizer:
        if self.p.optimizer == "adam":
            return torch.optim.Adam(params, lr=lr)
        return torch.optim.SGD(params, lr=lr, momentum=self.p.momentum or 0.0)

    def checkpoint(
        self,
        gb: torch.Generator,
        opt: torch.optim.Optimizer,
        params: list[torch.Tensor],
        last: dict[str, Any],
        loss: float,
    ) -> Checkpoint:
        """The state after epoch `self.epochs`'s training, before its row: K, W, the optimiser's state over
        `params`, the batch order's generator, the snapshots, the curve and summary so far, the last row and
        the epoch's loss (R, the data and the initial W come back from the seeds)."""
        net = self.net
        tensors = {f"w.{layer}": w.detach().to("cpu", copy=True) for layer, w in net.w.items()}
        tensors.update({f"k.{layer}": k.detach().to("cpu", copy=True) for layer, k in net.k.items()})
        tensors.update(
            {f"snap.{name}": snap[2].to("cpu", copy=True) for name, snap in self.snap.items() if name != "init_w"}
        )
        tensors.update(optimizer_tensors(opt, params, "opt."))
        tensors["gen.batch"] = gb.get_state()
        state = {
            "curve": {k: list(v) for k, v in self.curve.items()},
            "summary": dict(self.summary),
            "flops": self.flops,
            "steps": self.steps,
            "last": dict(last),
            "loss": loss,
        }
        return Checkpoint(self.epochs, tensors, state)

    def restore(self, ckpt: Checkpoint, gb: torch.Generator) -> tuple[dict[str, Any], float]:
        """Start after epoch `ckpt.step`'s training; (the last row, that epoch's loss)."""
        net, st = self.net, ckpt.state
        with torch.no_grad():
            for layer in net.w:
                net.w[layer].copy_(ckpt.tensors[f"w.{layer}"])
                net.k[layer].copy_(ckpt.tensors[f"k.{layer}"])
        for name in ("pre_w", "pre_k"):
            if f"snap.{name}" in ckpt.tensors:
                self.snap[name] = {2: ckpt.tensors[f"snap.{name}"].to(self.dev, copy=True)}
        gb.set_state(ckpt.tensors["gen.batch"].clone())
        self.curve = {k: list(v) for k, v in st["curve"].items()}
        self.summary = dict(st["summary"])
        self.flops, self.steps, self.epochs = st["flops"], st["steps"], ckpt.step
        return dict(st["last"]), st["loss"]

    def run(self) -> Outcome:
        p, net = self.p, self.net
        gb = generator(p.iseed(), "hierarchical", "batch")
        n = self.xtr.shape[0]
        n_batches = n // p.batch
        plan = phases(p)
        total_epochs = sum(phase.epochs for phase in plan)
        resume = self.ctx.resume
        if resume is None:
            last, loss = self.record(plan[0], math.nan, initial=True), math.nan
            at, first = 0, 0
        else:
            last, loss = self.restore(resume, gb)
            at, first = position([phase.epochs for phase in plan], resume.step)
        # The resumed epoch's training is in the checkpoint; its row (and what follows it) is not.
        pending = resume is not None
        status: Status = OK
        diverged_step: int | None = None
        kept: torch.optim.Optimizer | None = None
        for index, phase in enumerate(plan[at:], start=at):
            resumed_here = resume is not None and index == at
            if phase.distill_before is not None and not resumed_here:
                layer = phase.distill_before
                distilled = initial_distill(net.w[layer].detach(), net.split(layer), net.ks[layer - 2])
                with torch.no_grad():  # in place: a kept optimiser holds this tensor
                    net.k[layer].copy_(distilled)
            for layer in range(2, p.L + 1):
                net.w[layer].requires_grad_(layer in phase.train_w)
                net.k[layer].requires_grad_(layer in phase.train_k)
            params = [net.w[x] for x in sorted(phase.train_w)] + [net.k[x] for x in sorted(phase.train_k)]
            if p.opt_state == "keep":
                # one optimiser over every tensor for the whole run (the spec's prototype): a frozen tensor has
                # no gradient, so Adam and SGD skip it and its moments wait for its next phase
                kept = kept or self.optimiser(net.tensors(), phase.lr)
                for group in kept.param_groups:
                    group["lr"] = phase.lr
                opt, opt_params = kept, net.tensors()
            else:
                opt, opt_params = self.optimiser(params, phase.lr), params
            if resumed_here:
                assert resume is not None
                load_optimizer(opt, opt_params, resume.tensors, "opt.")
            per_step = self.step_flops(phase)
            truncated = net.trunc is not None
            for epoch in range(first if resumed_here else 0, phase.epochs):
                if pending:
                    pending = False
                else:
                    perm = torch.randperm(n, generator=gb).to(self.dev)
                    total = torch.zeros((), dtype=torch.float64, device=self.dev)
                    for b in range(n_batches):
                        idx = perm[b * p.batch : (b + 1) * p.batch]
                        pred = output(net, self.xtr[idx], phase.top, truncated)
                        obj = ((pred - self.ytr[idx]) ** 2).mean() + self.regulariser(phase)
                        opt.zero_grad(set_to_none=True)
                        obj.backward()
                        if p.clip is not None:
                            for t in params:
                                if t.grad is not None:
                                    torch.nn.utils.clip_grad_norm_([t], p.clip)
                        opt.step()
                        self.steps += 1
                        self.flops += per_step
                        total = total + obj.detach().double()
                        if b % 16 == 15 or b == n_batches - 1:
                            value = float(obj.detach())
                            if is_diverged(value) or not all(torch.isfinite(t).all() for t in params):
                                status, diverged_step = DIVERGED, self.steps
                                break
                    if status == "diverged":
                        break
                    self.epochs += 1
                    loss = float(total) / max(n_batches, 1)
                    build = partial(self.checkpoint, gb, opt, opt_params, last, loss)
                    if not self.ctx.checkpoint(self.epochs, build, last=self.epochs == total_epochs):
                        status = self.ctx.stop_status()
                        return Outcome(status, {}, {}, 0, net=net)
                if self.epochs % p.log_every == 0 or epoch == phase.epochs - 1:
                    last = self.record(phase, loss)
                    if not self.ctx.report(self.epochs, test_mse=last["test_mse"], train_mse=last["train_mse"]):
                        status = self.ctx.stop_status()
                        break
            if status != "ok":
                break
            if phase.epochs == 0:
                last = self.record(phase, math.nan)
            if phase.ends_layer is not None:
                self.after_layer(phase.ends_layer, last)
        for t in net.tensors():
            t.requires_grad_(False)
        self.finish(last)
        if status == "diverged":
            # the last evaluated point predates the blow-up: the result is an infinite error
            for key in ("test_mse", "train_mse", "val_mse", "test_median_se"):
                self.summary[key] = math.inf
        return Outcome(
            status, self.curve, self.summary, self.steps, diverged_step, self.flops, net=net, snapshots=self.snap
        )

    def after_layer(self, layer: int, row: dict[str, Any]) -> None:
        self.summary[f"mse_after_l{layer}"] = row["test_mse"]
        self.summary[f"train_mse_after_l{layer}"] = row["train_mse"]
        for low in range(2, layer + 1):
            self.summary[f"fe{low}_after_l{layer}"] = row[f"fe_orth_l{low}"]
        if layer == 2:
            self.snap["pre_w"] = {2: self.net.w[2].detach().clone()}
            self.snap["pre_k"] = {2: self.net.k[2].detach().clone()}

    def finish(self, row: dict[str, Any]) -> None:
        s = self.summary
        for key in ("test_mse", "train_mse", "val_mse", "test_median_se", "test_mse_trunc", "trunc_gap"):
            s[key] = row.get(key, math.nan)
        for layer in LAYERS:
            for prefix in ("fe_orth_l", "fe_lin_l", "reg_gap_l"):
                s[f"{prefix}{layer}"] = row.get(f"{prefix}{layer}", math.nan)
        w2, k2 = self.net.w[2], self.net.k[2]
        pre_w = self.snap.get("pre_w", {}).get(2)
        pre_k = self.snap.get("pre_k", {}).get(2)
        s["wcorr_w2_pre_post"] = row_cosine(pre_w, w2) if pre_w is not None else math.nan
        s["wcorr_k2_pre_post"] = row_cosine(pre_k, k2) if pre_k is not None else math.nan
        s["wcorr_w2_init_final"] = row_cosine(self.snap["init_w"][2], w2)
        s["wgram_change_w2"] = gram_change(pre_w, w2) if pre_w is not None else math.nan
