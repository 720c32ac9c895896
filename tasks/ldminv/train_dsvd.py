"""Algorithms 2-3: the D-SVD forward pass, its training, and Table 3's metrics.

Training follows Algorithm 3: per outer iteration, in the forward pass, each layer's inner LD-Minv
(one coefficient set for U and one for V) is trained by Algorithm 1 for `inner_iters` steps on that
layer's matrices I + t P / 2 (detached), then the Cayley update is taken; after the pass one (S)GD
step is taken on the per-layer step offsets on M_n = 1/(n K) sum_i sum_k f(U_ik, V_ik).
"""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from tasks.base import RunContext, is_diverged
from tasks.common import generator, torch_dtype
from tasks.ldminv import dsvd as D
from tasks.ldminv import matrix_path as MP
from tasks.ldminv.coefficients import initial_coefficients
from tasks.ldminv.data import DataSpec, Source
from tasks.ldminv.engine import eq4
from tasks.ldminv.flops import minv_forward_flops
from tasks.ldminv.params import DsvdParams
from tasks.ldminv.train_minv import MinvOutcome


class DsvdModel:
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

    def train_inner(self, k: int, side: int, data: D.LayerData) -> None:
        """Algorithm 1 on this layer's I + tP/2 for inner_iters steps (SGD at inner_lr)."""
        c = self.coeffs[k][side].clone().requires_grad_(True)
        opt = torch.optim.SGD([c], lr=self.p.inner_lr)
        a = data.a
        x0 = a.transpose(-2, -1) / data.c0[..., None, None]
        for _ in range(self.p.inner_iters):
            opt.zero_grad()
            loss = eq4([MP.residual_sq(a, x) for x in MP.ldminv(a, x0, c, "hyperpower", self.p.L_inv)])
            if not math.isfinite(float(loss.detach())):
                return
            loss.backward()
            opt.step()
        self.coeffs[k][side] = c.detach()

    def forward(
        self, m: torch.Tensor, u: torch.Tensor, v: torch.Tensor, depth: int, train_inner: bool = False
    ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """f per layer (list of (n,)), and the final U, V."""
        fs = []
        mt = m.transpose(-2, -1)
        for k in range(depth):
            cu = self.coeffs[k][0] if self.inv.kind == "ldminv" else None
            if train_inner and self.p.inner_iters and cu is not None:
                _, data = D.half_step(m, u, v, self.offsets[k, 0].detach(), cu, self.inv, self.p.step_rule)
                self.train_inner(k, 0, data)
                cu = self.coeffs[k][0]
            u, du = D.half_step(m, u, v, self.offsets[k, 0], cu, self.inv, self.p.step_rule)
            if k == 0:
                self.first_layer_neg.append(float((du.t_rule < 0).to(torch.float64).mean()))
            cv = self.coeffs[k][1] if self.inv.kind == "ldminv" else None
            if train_inner and self.p.inner_iters and cv is not None:
                _, data = D.half_step(mt, v, u, self.offsets[k, 1].detach(), cv, self.inv, self.p.step_rule)
                self.train_inner(k, 1, data)
                cv = self.coeffs[k][1]
            v, _ = D.half_step(mt, v, u, self.offsets[k, 1], cv, self.inv, self.p.step_rule)
            fs.append(D.objective(m, u, v))
        return fs, u, v


def _draw(p: DsvdParams, seed: int, split: str, n: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    spec = DataSpec("gauss", p.m, p.n_hat, None, p.entry_scale, None)
    m = Source(spec, seed, split).matrices(n)
    r = p.r or min(p.m, p.n_hat)
    g = generator(seed, "ldminv", split, "stiefel")
    u0, v0 = D.stiefel_init(n, p.m, r, g), D.stiefel_init(n, p.n_hat, r, g)
    sigma_sum = torch.linalg.svdvals(m)[..., :r].sum(-1).mean()
    return tuple(t.to(dtype).to(device) for t in (m, u0, v0, sigma_sum))


def evaluate(model: DsvdModel, test: tuple[torch.Tensor, ...]) -> dict[str, float]:
    m, u0, v0, sigma_sum = test
    with torch.no_grad():
        fs, u, v = model.forward(m, u0, v0, model.p.K_svd)
        mse, orth = D.svd_errors(m, u, v)
    obj = float(fs[-1].mean())
    return {
        "test_obj": obj,
        "test_loss": obj + float(sigma_sum),
        "svd_mse_sum": float(mse.mean()),
        "svd_mse_mean": float(mse.mean()) / model.r,
        "orth_err": float(orth.max()),
    }


def run_dsvd(p: DsvdParams, ctx: RunContext) -> MinvOutcome:
    dtype = torch_dtype(p.dtype)
    data_seed = p.seed if p.data_seed is None else p.data_seed
    test = _draw(p, data_seed, "test", p.n_test, dtype, ctx.device)
    model = DsvdModel(p, ctx.device)
    init = evaluate(model, test)
    neg_first = model.first_layer_neg[-1]
    curve: dict[str, list[Any]] = {"step": [0], "train_loss": [math.nan], "test_loss": [init["test_loss"]]}
    status, diverged_step, steps = "ok", None, 0
    if is_diverged(init["test_loss"]):
        status, diverged_step = "diverged", 1
    stopped = not ctx.report(0, test_loss=init["test_loss"])
    if p.iters and status == "ok" and not stopped:
        pool = _draw(p, data_seed, "train", p.n_train, dtype, ctx.device)
        bg = generator(p.seed if p.init_seed is None else p.init_seed, "ldminv", "dsvd_batches")
        opt = (torch.optim.Adam if p.optimizer == "adam" else torch.optim.SGD)([model.offsets], lr=p.lr)
        for it in range(1, p.iters + 1):
            idx = torch.randperm(p.n_train, generator=bg)[: p.batch].to(ctx.device)
            opt.zero_grad()
            fs, _, _ = model.forward(pool[0][idx], pool[1][idx], pool[2][idx], p.K_svd, train_inner=True)
            loss = torch.stack([f.mean() for f in fs]).mean()
            value = float(loss.detach())
            if is_diverged(value):
                status, diverged_step = "diverged", it
                break
            loss.backward()
            opt.step()
            steps = it
            if it % p.log_every == 0 or it == p.iters:
                tl = evaluate(model, test)["test_loss"]
                curve["step"].append(it)
                curve["train_loss"].append(value + float(pool[3]))
                curve["test_loss"].append(tl)
                if is_diverged(tl):
                    status, diverged_step = "diverged", it
                    break
                if not ctx.report(it, train_loss=value, test_loss=tl):
                    stopped = True
                    break
    if stopped:
        status = ctx.stop_status()
    final = evaluate(model, test) if steps else init
    dev = max(float((c - 1.0).abs().max()) for pair in model.coeffs for c in pair)
    summary: dict[str, Any] = {
        **final,
        "test_loss_init": init["test_loss"],
        "svd_mse_sum_init": init["svd_mse_sum"],
        "neg_step_frac": neg_first,
        "t_offsets_json": json.dumps([round(float(t), 12) for t in model.offsets.detach().flatten()]),
        "max_abs_c_dev": dev,
        "diverged": status == "diverged",
    }
    per_layer = layer_flops(p)
    flops = per_layer * p.K_svd * (p.n_test * (2 + (1 if steps else 0)) + 3 * p.batch * steps)
    return MinvOutcome(status, summary, curve, max(steps, p.K_svd), diverged_step, flops)


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
