"""Algorithm 1: train the K*L coefficients of LD-Minv on the deep-supervised loss Eq. 4, then evaluate.

The test loss is the paper's: (1/n) sum_i ||A_i X_{K,i} A_i - A_i||_F^2 on the last layer, over a
seeded test set; the same test set also gives the fixed D-Minv baseline and the loss at the init.
A non-finite or astronomically large training loss stops the run as `diverged` at that iteration.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import torch

from tasks.base import RunContext, is_diverged
from tasks.common import generator, torch_dtype
from tasks.ldminv import theory as T
from tasks.ldminv.coefficients import identity_value, initial_coefficients, project_box
from tasks.ldminv.data import DataSpec, Source
from tasks.ldminv.engine import Batch, Engine, eq4
from tasks.ldminv.flops import minv_forward_flops
from tasks.ldminv.params import MinvParams

EVAL_CHUNK = 500  # matrices per evaluation chunk (bounds the matrix path's memory)


@dataclass
class MinvOutcome:
    status: str
    summary: dict[str, Any]
    curve: dict[str, list[Any]] = field(default_factory=dict)
    n_steps: int = 0
    diverged_step: int | None = None
    flops: float = 0.0


def data_spec(p: MinvParams) -> DataSpec:
    return DataSpec(p.data, p.rows, p.cols, p.rank, p.entry_scale, p.kappa)


def make_engine(p: MinvParams, device: str) -> Engine:
    return Engine(data_spec(p), p.path, p.model, p.L, p.c0_rule, p.c0_factor, p.k_warm, torch_dtype(p.dtype), device)


def start_coefficients(p: MinvParams) -> torch.Tensor:
    seed = p.seed if p.init_seed is None else p.init_seed
    return initial_coefficients(
        p.model,
        p.K,
        p.L,
        p.coeff_init,
        seed,
        scale=p.init_scale,
        alpha=p.init_alpha,
        delta=p.delta,
        given=p.coeffs,
    )


def _chunked_losses(engine: Engine, b: Batch, coeffs: torch.Tensor | None, depth: int) -> list[torch.Tensor]:
    """Per-layer losses over a large set, in chunks, without a graph."""
    parts: list[list[torch.Tensor]] = []
    with torch.no_grad():
        for lo in range(0, len(b), EVAL_CHUNK):
            idx = torch.arange(lo, min(lo + EVAL_CHUNK, len(b)), device=b.base.device)
            sub = b.take(idx)
            parts.append(engine.fixed_losses(sub, depth) if coeffs is None else engine.losses(sub, coeffs))
    return [torch.cat([p[k] for p in parts]) for k in range(depth)]


def _log10(v: float) -> float:
    return math.log10(v) if v > 0 else -300.0 if v == 0 else math.nan


class Trainer:
    def __init__(self, p: MinvParams, ctx: RunContext) -> None:
        self.p, self.ctx = p, ctx
        self.engine = make_engine(p, ctx.device)
        data_seed = p.seed if p.data_seed is None else p.data_seed
        self.test = self.engine.draw(Source(self.engine.spec, data_seed, "test"), p.n_test)
        self.train_source = Source(self.engine.spec, data_seed, "train")
        self.pool = None if p.n_train is None else self.engine.draw(self.train_source, p.n_train)
        self.batch_gen = generator(p.seed if p.init_seed is None else p.init_seed, "ldminv", "batches")
        self.coeffs = start_coefficients(p).to(ctx.device).requires_grad_(True)

    def next_batch(self) -> Batch:
        if self.pool is None:
            return self.engine.draw(self.train_source, self.p.batch)
        idx = torch.randperm(len(self.pool), generator=self.batch_gen)[: self.p.batch]
        return self.pool.take(idx.to(self.pool.base.device))

    def test_loss(self, coeffs: torch.Tensor | None) -> float:
        return float(_chunked_losses(self.engine, self.test, coeffs, self.p.K)[-1].mean())

    def optimizer(self) -> torch.optim.Optimizer:
        if self.p.optimizer == "adam":
            return torch.optim.Adam([self.coeffs], lr=self.p.lr)
        return torch.optim.SGD([self.coeffs], lr=self.p.lr)

    def max_dev(self) -> float:
        return float((self.coeffs.detach() - identity_value(self.p.model)).abs().max())

    def run(self) -> MinvOutcome:
        p = self.p
        init_coeffs = self.coeffs.detach().clone()
        curve: dict[str, list[Any]] = {
            k: [] for k in ("step", "train_loss", "test_loss", "lr", "max_abs_c_dev", "grad_norm")
        }
        opt = self.optimizer()
        sched = (
            torch.optim.lr_scheduler.StepLR(opt, step_size=p.lr_halve_every, gamma=0.5) if p.lr_halve_every else None
        )
        status, diverged_step, hit_tol, grad_init_max = "ok", None, -1, math.nan
        test0 = self.test_loss(init_coeffs)
        curve_row = {
            "step": 0,
            "train_loss": math.nan,
            "test_loss": test0,
            "lr": p.lr,
            "max_abs_c_dev": self.max_dev(),
            "grad_norm": math.nan,
        }
        for k, v in curve_row.items():
            curve[k].append(v)
        stopped = not self.ctx.report(0, test_loss=test0)
        steps = 0
        last_train = math.nan
        for it in range(1, p.iters + 1):
            if stopped:
                break
            opt.zero_grad()
            loss = eq4(self.engine.losses(self.next_batch(), self.coeffs))
            value = float(loss.detach())
            if is_diverged(value):
                status, diverged_step = "diverged", it
                break
            loss.backward()
            assert self.coeffs.grad is not None
            if it == 1:
                grad_init_max = float(self.coeffs.grad.max())
            gnorm = float(self.coeffs.grad.norm())
            if p.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_([self.coeffs], p.grad_clip)
            lr_now = opt.param_groups[0]["lr"]
            opt.step()
            if p.project_box:
                project_box(self.coeffs, p.model)
            if sched is not None:
                sched.step()
            steps, last_train = it, value
            if hit_tol < 0 and value <= p.train_tol:
                hit_tol = it
            if not all(math.isfinite(float(c)) for c in self.coeffs.detach().flatten()):
                status, diverged_step = "diverged", it
                break
            if it % p.log_every == 0 or it == p.iters:
                tl = self.test_loss(self.coeffs.detach())
                for key, v in (
                    ("step", it),
                    ("train_loss", value),
                    ("test_loss", tl),
                    ("lr", lr_now),
                    ("max_abs_c_dev", self.max_dev()),
                    ("grad_norm", gnorm),
                ):
                    curve[key].append(v)
                if is_diverged(tl):
                    status, diverged_step = "diverged", it
                    break
                if not self.ctx.report(it, train_loss=value, test_loss=tl):
                    stopped = True
        if stopped:
            status = self.ctx.stop_status()
        return self.finish(status, diverged_step, steps, curve, init_coeffs, test0, hit_tol, grad_init_max, last_train)

    def finish(
        self,
        status: str,
        diverged_step: int | None,
        steps: int,
        curve: dict[str, list[Any]],
        init_coeffs: torch.Tensor,
        test0: float,
        hit_tol: int,
        grad_init_max: float,
        last_train: float,
    ) -> MinvOutcome:
        p = self.p
        final = self.coeffs.detach()
        test_layers = _chunked_losses(self.engine, self.test, final, p.K)
        test = float(test_layers[-1].mean())
        fixed = float(_chunked_losses(self.engine, self.test, None, p.K)[-1].mean())
        test_eq4 = float(eq4(test_layers))
        if self.pool is not None:
            train_eq4 = float(eq4(_chunked_losses(self.engine, self.pool, final, p.K)))
            n_eval = len(self.pool)
        else:
            train_eq4, n_eval = last_train, 0
        summary: dict[str, Any] = {
            "test_loss": test,
            "log10_test_loss": _log10(test),
            "neg_log10_test_loss": -_log10(test),
            "test_loss_dminv": fixed,
            "log10_test_loss_dminv": _log10(fixed),
            "test_loss_init": test0,
            "log10_gain_vs_dminv": _log10(fixed) - _log10(test),
            "test_loss_eq4": test_eq4,
            "train_loss_final": train_eq4,
            "log10_train_loss_final": _log10(train_eq4),
            "gen_gap": test_eq4 - train_eq4,
            "max_abs_c_dev": self.max_dev(),
            "max_abs_c_dev_init": float((init_coeffs - identity_value(p.model)).abs().max()),
            "coeffs_json": json.dumps([round(float(c), 12) for c in final.flatten()]),
            "iters_to_tol": hit_tol,
            "grad_init_max": grad_init_max,
            "fwd_equiv": 3 * p.batch * steps + n_eval,
            "slope_pred_frob": T.frobenius_slope(p.L),
            "c0_mean": float(self.test.c0.mean()),
            "at_floor": bool(test <= (1e-28 if p.dtype == "float64" else 1e-12) * max(1.0, fixed)),
            "diverged": status == "diverged",
        }
        summary.update(self.spectral_stats(final))
        if p.theory_checks:
            summary.update(T.lemma1_prop1(self.test.base, self._x0_plain(), self.test.c0, p.K, p.L, p.k_warm))
        flops = minv_forward_flops(p.rows, p.cols, p.K, p.L) * (3 * p.batch * steps + n_eval + 3 * p.n_test)
        return MinvOutcome(status, summary, curve, max(steps, p.K), diverged_step, flops)

    def _x0_plain(self) -> torch.Tensor:
        return self.test.start

    def spectral_stats(self, final: torch.Tensor) -> dict[str, Any]:
        """e0, ||e_K||_inf, ||X_K||_2, Prop. 4's bound and the effective order (Lemma 2)."""
        p = self.p
        dev = self.max_dev()
        with torch.no_grad():
            if p.path == "matrix":
                x = self.engine.final_state(self.test, final)
                xn = float(torch.linalg.matrix_norm(x.to(torch.float64), ord=2).max())
                return {
                    "x_norm_max": xn,
                    "e0_max": math.nan,
                    "e_inf_final": math.nan,
                    "prop4_bound": math.nan,
                    "order_empirical": math.nan,
                }
            sv, e0 = self.test.base, self.test.start
            pos = sv > sv.amax(dim=-1, keepdim=True) * 1e-12
            es = self.engine.spectral_layers(self.test, final)
            e_k = es[-1]
            e0_max = float(torch.where(pos, e0.abs(), torch.zeros_like(e0)).max())
            e_inf = float(torch.where(pos, e_k.abs(), torch.zeros_like(e_k)).max())
            x = torch.where(pos, (1.0 - e_k) / sv.clamp_min(1e-300), torch.zeros_like(sv))
            order = T.empirical_order(es, sv * pos)
        return {
            "x_norm_max": float(x.abs().max()),
            "e0_max": e0_max,
            "e_inf_final": e_inf,
            "prop4_bound": T.prop4_bound(e0_max, p.K, p.L, dev),
            "order_empirical": order,
        }


def run_minv(p: MinvParams, ctx: RunContext) -> MinvOutcome:
    return Trainer(p, ctx).run()
