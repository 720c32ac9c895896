"""The plain DenseNet of spec 2.1 (claim C12): G_0 = x, G_1 = sigma(x) - mean_train sigma(x),
G_l = sigma(sum_{j in J_l} W_{l,j} G_j) in R^m for l >= 2, output G(x) = sum_l u_l^T G_l(x).
sigma is z^2, z + 0.1 z^2 (the paper's quadratic nets) or ReLU. Every layer trains from step 0;
no staging, no distillation: this is the network the paper's CIFAR quadratic nets stand for."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import torch

from tasks.base import Checkpoint, RunContext, is_diverged
from tasks.common import generator, torch_dtype
from tasks.hierarchical import flops as FL
from tasks.hierarchical.data import Data
from tasks.hierarchical.metrics import median_se, nmse
from tasks.hierarchical.params import DenseNetParams
from tasks.hierarchical.schedule import position
from tasks.hierarchical.target import Target
from tasks.resume_state import load_optimizer, optimizer_tensors
from tasks.status import DIVERGED, OK, Status


def activation(name: str, z: torch.Tensor) -> torch.Tensor:
    if name == "square":
        return z * z
    if name == "quad_lin":
        return z + 0.1 * z * z
    return torch.relu(z)


class DenseNet:
    def __init__(self, p: DenseNetParams, target: Target, x_train: torch.Tensor, device: str) -> None:
        dt = torch_dtype(p.dtype)
        self.p, self.graph, self.depth = p, target.graph, p.L
        self.act = p.activation
        self.mean1 = activation(p.activation, x_train).mean(0).to(device, dt)
        self.w: dict[tuple[int, int], torch.Tensor] = {}
        self.u: dict[int, torch.Tensor] = {}
        for layer in range(2, p.L + 1):
            g = generator(p.iseed(), "hierarchical", "dense", layer)
            dims = {j: (p.d if j < 2 else p.m) for j in self.graph[layer]}
            fan_in = sum(dims.values())  # N(0, 1/fan_in): unit-variance pre-activations at init
            for j in self.graph[layer]:
                w = torch.randn(p.m, dims[j], generator=g, dtype=torch.float64) / math.sqrt(fan_in)
                self.w[(layer, j)] = w.to(device, dt).requires_grad_(True)
            u = torch.randn(p.m, generator=g, dtype=torch.float64) * (p.w_init / math.sqrt(p.m))
            self.u[layer] = u.to(device, dt).requires_grad_(True)

    def params(self) -> list[torch.Tensor]:
        return [*self.w.values(), *self.u.values()]

    def named(self) -> dict[str, torch.Tensor]:
        """Every trained tensor by a checkpoint name."""
        return {
            **{f"w.{layer}.{j}": w for (layer, j), w in self.w.items()},
            **{f"u.{layer}": u for layer, u in self.u.items()},
        }

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        g: dict[int, torch.Tensor] = {0: x, 1: activation(self.act, x) - self.mean1}
        out = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for layer in range(2, self.depth + 1):
            z = sum(g[j] @ self.w[(layer, j)].T for j in self.graph[layer])
            assert isinstance(z, torch.Tensor)
            g[layer] = activation(self.act, z)
            out = out + g[layer] @ self.u[layer]
        return out


def train_densenet(
    p: DenseNetParams, target: Target, data: Data, ctx: RunContext
) -> tuple[Status, dict[str, list[Any]], dict[str, Any], float, int, int | None]:
    """(status, curve, summary, flops, n_steps, diverged_step)."""
    dt, dev = torch_dtype(p.dtype), ctx.device
    net = DenseNet(p, target, data.train.x, dev)
    xtr, ytr = data.train.x.to(dev, dt), data.train.y.to(dev, dt)
    gb = generator(p.iseed(), "hierarchical", "batch")
    fwd = FL.densenet_forward(p.d, p.m, target.graph, p.L)
    n_batches = xtr.shape[0] // p.batch
    curve: dict[str, list[Any]] = {
        "step": [],
        "phase": [],
        "top": [],
        "loss": [],
        "test_mse": [],
        "train_mse": [],
        "val_mse": [],
        "flops": [],
    }
    flops, steps, epochs = 0.0, 0, 0
    status: Status = OK
    diverged_step: int | None = None
    row: dict[str, float] = {}

    def record(stage: int, loss: float) -> dict[str, float]:
        nonlocal flops
        out: dict[str, float] = {}
        with torch.no_grad():
            for name, split in (("test", data.test), ("train", data.train), ("val", data.val)):
                pred = net(split.x.to(dev, dt)).cpu()
                flops += split.x.shape[0] * fwd
                out[f"{name}_mse"] = nmse(pred, split.y) if bool(torch.isfinite(pred).all()) else math.inf
                if name == "test":
                    out["test_median_se"] = median_se(pred, split.y) if math.isfinite(out["test_mse"]) else math.inf
        for key, val in (("step", epochs), ("phase", stage), ("top", p.L), ("loss", loss), ("flops", flops)):
            curve[key].append(val)
        for key in ("test_mse", "train_mse", "val_mse"):
            curve[key].append(out[key])
        return out

    stages = ((3, p.epochs, p.lr), (2, p.final_epochs, p.final_lr))
    loss = math.nan

    def checkpoint(opt: torch.optim.Optimizer) -> Checkpoint:
        """The state after epoch `epochs`'s training, before its row: the weights, the stage's optimiser
        state, the batch order's generator, the curve, counters, the last row and the epoch's loss."""
        tensors = {name: t.detach().to("cpu", copy=True) for name, t in net.named().items()}
        tensors.update(optimizer_tensors(opt, net.params(), "opt."))
        tensors["gen.batch"] = gb.get_state()
        state = {"curve": {k: list(v) for k, v in curve.items()}, "flops": flops, "steps": steps, "row": dict(row)}
        return Checkpoint(epochs, tensors, {**state, "loss": loss})

    resume = ctx.resume
    if resume is None:
        row = record(-1, math.nan)  # phase codes as in train_wk: -1 init, 3 all layers from the start, 2 final
        at, first = 0, 0
    else:
        with torch.no_grad():
            for name, t in net.named().items():
                t.copy_(resume.tensors[name])
        gb.set_state(resume.tensors["gen.batch"].clone())
        st = resume.state
        curve = {k: list(v) for k, v in st["curve"].items()}
        flops, steps, epochs, row, loss = st["flops"], st["steps"], resume.step, dict(st["row"]), st["loss"]
        at, first = position([n_ep for _, n_ep, _ in stages], resume.step)
    # The resumed epoch's training is in the checkpoint; its row is not.
    pending = resume is not None
    for index, (stage, n_ep, lr) in enumerate(stages[at:], start=at):
        opt: torch.optim.Optimizer
        if p.optimizer == "adam":
            opt = torch.optim.Adam(net.params(), lr=lr)
        else:
            opt = torch.optim.SGD(net.params(), lr=lr, momentum=p.momentum or 0.0)
        if resume is not None and index == at:
            load_optimizer(opt, net.params(), resume.tensors, "opt.")
        for epoch in range(first if index == at else 0, n_ep):
            if pending:
                pending = False
            else:
                perm = torch.randperm(xtr.shape[0], generator=gb).to(dev)
                total = 0.0
                for b in range(n_batches):
                    idx = perm[b * p.batch : (b + 1) * p.batch]
                    pred = net(xtr[idx])
                    fit = ((pred - ytr[idx]) ** 2).mean()
                    reg = sum((t**2).sum() for t in net.w.values())
                    obj = fit + p.wd * reg
                    opt.zero_grad(set_to_none=True)
                    obj.backward()
                    if p.clip is not None:
                        for t in net.params():
                            torch.nn.utils.clip_grad_norm_([t], p.clip)
                    opt.step()
                    steps += 1
                    flops += 3.0 * p.batch * fwd
                    value = float(obj.detach())
                    total += value
                    if is_diverged(value):
                        status, diverged_step = DIVERGED, steps
                        break
                if status != "ok":
                    break
                epochs += 1
                loss = total / max(n_batches, 1)
                if not ctx.checkpoint(epochs, partial(checkpoint, opt), last=epochs == p.epochs + p.final_epochs):
                    return ctx.stop_status(), {}, {}, 0.0, 0, None
            if epochs % p.log_every == 0 or epoch == n_ep - 1:
                row = record(stage, loss)
                if not ctx.report(epochs, test_mse=row["test_mse"], train_mse=row["train_mse"]):
                    status = ctx.stop_status()
                    break
        if status != "ok":
            break
    summary: dict[str, Any] = {k: row.get(k, math.nan) for k in ("test_mse", "train_mse", "val_mse", "test_median_se")}
    if status == "diverged":
        summary.update({k: math.inf for k in summary})
    return status, curve, summary, flops, steps, diverged_step
