"""deep_linear: layer-wise training of deep linear networks (paper 002, Shin), the Task the runner sees.

`run` builds the data and the optimum, initialises the weights, drives one learner generator
(BCGD, GD or BCSGD; each yields the end-to-end matrix after every iteration), evaluates the paper's
error after every iteration (needed for iterations-to-1e-10 and divergence), logs a curve row every
`log_every` iterations, and returns the summary with the theory's predictions for the config.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from tasks.base import FieldType, Result, RunContext, is_diverged
from tasks.common import torch_dtype
from tasks.deep_linear import theory
from tasks.deep_linear.bcgd import bcgd
from tasks.deep_linear.bcsgd import BCSGDStats, bcsgd
from tasks.deep_linear.data import Problem, make_problem
from tasks.deep_linear.flops import FlopCounter
from tasks.deep_linear.gd import du_hu_lr, gd
from tasks.deep_linear.init import end_to_end, init_weights
from tasks.deep_linear.objective import L2Objective, L4Objective
from tasks.deep_linear.params import SPEC, AnyParams, BCGDParams, BCSGDParams, GDParams
from tasks.status import DIVERGED, OK, Status

INCREASE_RTOL = 1e-10  # an iteration "increases" the error when err_new > err_old (1 + this) ...
NOISE_FLOOR = 1e-20  # ... and err_old > this * err_0: below it (float64 floor ~1e-29) changes are rounding
NAN = math.nan


def theory_summary(p: AnyParams, prob: Problem, w0: torch.Tensor) -> dict[str, Any]:
    """The theory's predictions for this config (Thms 3.3 and 3.4, Lemma 3.1)."""
    kappa = prob.kappa_x
    depth = p.L
    widths = p.layer_widths()
    eta_bar = 1.0
    if isinstance(p, BCGDParams) and p.lr_rule == "thm32":
        eta_bar = float(p.eta_bar)  # type: ignore[arg-type]  # set for thm32 (validator)
    theory_rule = isinstance(p, BCGDParams) and p.loss == "l2" and p.lr_rule != "const"
    wx = (prob.w_star @ prob.xh).double()
    sig_wx = torch.linalg.svdvals(wx)
    sigma_min_wx = float(sig_wx[-1]) if sig_wx.shape[0] == prob.w_star.shape[0] else 0.0
    sigma_tilde = sigma_min_wx / float(prob.sv[0])
    c = theory.thm33_c(kappa, sigma_tilde, depth) if sigma_tilde > 0 else math.inf
    radius = sigma_tilde / c
    dist = float(torch.linalg.matrix_norm((w0 - prob.w_star).double()))
    dist_x = float(torch.linalg.matrix_norm(((w0 - prob.w_star) @ prob.xh).double()))
    full_row_rank = prob.r_x == p.d_in
    wide = min(widths[1:-1], default=max(p.d_in, p.d_out)) >= max(p.d_in, p.d_out)
    applies = theory_rule and full_row_rank and wide and p.init == "orth_identity" and eta_bar <= 1 and dist <= radius
    out = {
        "rate_sweep_thm33": theory.rate_sweep_thm33(kappa, depth, eta_bar) if theory_rule else NAN,
        "rate_sweep_lemma31": theory.rate_sweep_lemma31(kappa, depth, eta_bar) if theory_rule else NAN,
        "thm33_radius": radius,
        "thm33_applies": bool(applies),
        "thm34_depth_rhs": NAN,
        "init_dist_fro": dist,
    }
    if p.d_out == 1 and sigma_min_wx > 0 and math.isfinite(c):
        out["thm34_depth_rhs"] = theory.thm34_depth_rhs(sigma_min_wx, c, dist_x, kappa, eta_bar)
    return out


class DeepLinearTask:
    name: ClassVar[str] = SPEC.name
    version: ClassVar[str] = SPEC.version  # bump it in params.py, where the driver reads it
    Params: ClassVar[Any] = SPEC.Params
    summary_fields: ClassVar[dict[str, FieldType]] = {
        "err_0": "float",
        "err_final": "float",
        "err_min": "float",
        "err_sweep1": "float",
        "loss_final": "float",
        "loss_star": "float",
        "iters_to_tol": "int",
        "sweeps_to_tol": "float",
        "flops_to_tol": "float",
        "n_increase": "int",
        "frac_increase": "float",
        "max_rel_increase": "float",
        "lr_used": "float",
        "lr_median": "float",
        "lr_du_hu": "float",
        "cond_x": "float",
        "kappa_x": "float",
        "rank_x": "int",
        "cond_attempts": "int",
        "min_width": "int",
        "w_star_fro": "float",
        "init_dist_fro": "float",
        "l4_grad_rel": "float",
        "rate_sweep_thm33": "float",
        "rate_sweep_lemma31": "float",
        "thm33_radius": "float",
        "thm33_applies": "bool",
        "thm34_depth_rhs": "float",
        "thm32_max_ratio": "float",
        "thm32_violations": "int",
        "bcsgd_floor_low": "float",
        "bcsgd_floor_upp": "float",
        "bcsgd_m_upp": "float",
        "bcsgd_m_low": "float",
        "bcsgd_gamma_low": "float",
        "bcsgd_gamma_upp": "float",
        "err_tail": "float",
        "flops_learner": "float",
        "flops_metric": "float",
        "flops_setup": "float",
        "flops_per_iter": "float",
        "data_sha256": "str",
    }
    curve_fields: ClassVar[dict[str, FieldType]] = {
        "err": "float",  # (1/m)[||WX-Y||^p - ||W*X-Y||^p], un-halved (the paper's y-axis)
        "loss": "float",  # (1/m)||WX-Y||^p = err + loss_star
        "lr": "float",  # step of this iteration (NaN at step 0)
        "layer": "int",  # layer updated (1..L); -1: all layers (GD); 0: initial state
        "sweep": "float",  # iterations / L for BCGD/BCSGD, iterations for GD
        "flops": "float",  # cumulative learner flops (spec section 5 form, metric excluded)
    }
    examples: ClassVar[list[dict[str, Any]]] = [
        {"algo": "bcgd", "d_in": 16, "d_out": 4, "m": 60, "L": 5, "n_iters": 60, "seed": 1},
        {"algo": "gd", "d_in": 16, "d_out": 4, "m": 60, "L": 3, "lr": 0.05, "n_iters": 60, "log_every": 5},
        {"algo": "bcsgd", "d_in": 12, "d_out": 3, "m": 40, "L": 3, "eta_bar": 0.5, "n_iters": 60},
        {
            "algo": "bcgd",
            "data": "gauss_bigcond",
            "d_in": 12,
            "d_out": 4,
            "m": 50,
            "L": 4,
            "width": 16,
            "init": "balanced",
            "order": "asc",
            "loss": "l4",
            "n_iters": 40,
        },
    ]
    diverging_example: ClassVar[dict[str, Any] | None] = {
        "algo": "gd",
        "lr_rule": "du_hu",
        "d_in": 32,
        "d_out": 10,
        "m": 150,
        "L": 10,
        "n_iters": 200,
    }

    def run(self, p: AnyParams, ctx: RunContext) -> Result:
        prob = make_problem(p)
        widths = p.layer_widths()
        ws = init_weights(
            p.init,
            widths,
            p.init_seed_eff(),
            torch_dtype(p.dtype),
            balanced_std=p.balanced_std,
            random_std=p.random_std,
        )
        w0 = end_to_end(ws)
        summary: dict[str, Any] = {k: NAN for k, t in self.summary_fields.items() if t == "float"}
        summary.update(theory_summary(p, prob, w0))
        l4 = isinstance(p, BCGDParams) and p.loss == "l4"
        obj = L4Objective(prob) if l4 else L2Objective(prob)
        counter = FlopCounter()
        stats = BCSGDStats()
        lr_const = NAN
        if isinstance(p, GDParams):
            lr_const = du_hu_lr(prob, p.L) if p.lr_rule == "du_hu" else float(p.lr)  # type: ignore[arg-type]  # set for const (validator)
            updates = gd(prob, ws, lr_const, p.grad_scale, counter)
        elif isinstance(p, BCSGDParams):
            updates = bcsgd(prob, ws, p, counter, stats)
        else:
            lr_const = float(p.lr) if p.lr_rule == "const" else NAN  # type: ignore[arg-type]  # set for const
            updates = bcgd(prob, ws, p, counter)
        per_sweep = 1 if isinstance(p, GDParams) else p.L

        err0 = obj.err(w0)
        metric_evals = 1
        curve: dict[str, list[Any]] = {k: [] for k in ("step", "err", "loss", "lr", "layer", "sweep", "flops")}

        def log(step: int, err: float, lr: float, layer: int) -> None:
            curve["step"].append(step)
            curve["err"].append(err)
            curve["loss"].append(obj.loss(err))
            curve["lr"].append(lr)
            curve["layer"].append(layer)
            curve["sweep"].append(step / per_sweep)
            curve["flops"].append(counter.total)

        log(0, err0, NAN, 0)
        status: Status
        status, diverged_step, stop = OK, None, False
        if not ctx.report(0, err=err0):
            status, stop = ctx.stop_status(), True
        prev, err, err_min = err0, err0, err0
        iters_to_tol, flops_to_tol = -1, NAN
        n_inc, max_inc = 0, 0.0
        ratio_max, violations = NAN, 0
        lrs: list[float] = []
        tail_start = int(math.ceil(p.n_iters * (1 - getattr(p, "tail_frac", 0.25))))
        tail_sum, tail_n = 0.0, 0
        t = 0
        for t in range(1, 0 if stop else p.n_iters + 1):
            u = next(updates)
            err = obj.err(u.m)
            metric_evals += 1
            lrs.append(u.lr)
            if is_diverged(err):
                status, diverged_step = DIVERGED, t
                log(t, err, u.lr, u.layer)
                break
            noisy = prev <= NOISE_FLOOR * abs(err0)
            if err > prev * (1 + INCREASE_RTOL) and not noisy:
                n_inc += 1
                max_inc = max(max_inc, (err - prev) / abs(prev) if prev != 0 else math.inf)
            if not math.isnan(u.gamma2) and prob.err_offset == 0.0 and not noisy:
                ratio = (err / prev) / u.gamma2 if u.gamma2 > 0 else (math.inf if err > 1e-24 else 0.0)
                ratio_max = ratio if math.isnan(ratio_max) else max(ratio_max, ratio)
                violations += int(ratio > 1 + 1e-8)
            err_min = min(err_min, err)
            if t == per_sweep:
                summary["err_sweep1"] = err
            if t > tail_start:
                tail_sum, tail_n = tail_sum + err, tail_n + 1
            crossed = iters_to_tol < 0 and err <= p.tol
            if crossed:
                iters_to_tol, flops_to_tol = t, counter.total
            done = t == p.n_iters or (crossed and p.stop_at_tol)
            if t % p.log_every == 0 or crossed or done:
                log(t, err, u.lr, u.layer)
                if not ctx.report(t, err=err):
                    status = ctx.stop_status()
                    break
            if done:
                break
            prev = err
        flops_metric = metric_evals * obj.flops_per_eval
        finite_lrs = torch.tensor([v for v in lrs if math.isfinite(v)] or [NAN], dtype=torch.float64)
        summary.update(
            {
                "err_0": err0,
                "err_final": err,
                "err_min": err_min,
                "loss_final": obj.loss(err),
                "loss_star": obj.loss_star,
                "iters_to_tol": iters_to_tol,
                "sweeps_to_tol": iters_to_tol / per_sweep if iters_to_tol >= 0 else NAN,
                "flops_to_tol": flops_to_tol,
                "n_increase": n_inc,
                "frac_increase": n_inc / t if t else 0.0,
                "max_rel_increase": max_inc,
                "lr_used": lr_const,
                "lr_median": float(finite_lrs.median()),
                "lr_du_hu": du_hu_lr(prob, p.L),
                "cond_x": prob.cond_x,
                "kappa_x": prob.kappa_x,
                "rank_x": prob.r_x,
                "cond_attempts": prob.cond_attempts,
                "min_width": min(widths),
                "w_star_fro": float(
                    torch.linalg.matrix_norm(obj.w_star if isinstance(obj, L4Objective) else prob.w_star)
                ),
                "l4_grad_rel": obj.grad_rel if isinstance(obj, L4Objective) else NAN,
                "thm32_max_ratio": ratio_max,
                "thm32_violations": violations if isinstance(p, BCGDParams) and p.check_thm32 else -1,
                "err_tail": tail_sum / tail_n if tail_n else NAN,
                "flops_learner": counter.total,
                "flops_metric": flops_metric,
                "flops_setup": prob.setup_flops,
                "flops_per_iter": counter.total / t if t else 0.0,
                "data_sha256": prob.sha256,
            }
        )
        if isinstance(p, BCSGDParams):
            assert p.eta_bar is not None  # BCSGDParams' validator rejects None
            half_loss_star = 0.5 * prob.loss_star * prob.m  # L(W*) of the halved loss, un-normalised
            low, upp = theory.bcsgd_floors(
                float(p.eta_bar),
                half_loss_star,
                stats.m_upp,
                stats.m_low,
                stats.gamma_low,
                stats.gamma_upp,
                p.L,
            )
            summary.update(
                {
                    "bcsgd_floor_low": low / prob.m,
                    "bcsgd_floor_upp": upp / prob.m,
                    "bcsgd_m_upp": stats.m_upp,
                    "bcsgd_m_low": stats.m_low,
                    "bcsgd_gamma_low": stats.gamma_low,
                    "bcsgd_gamma_upp": stats.gamma_upp,
                }
            )
        else:
            summary["err_tail"] = NAN
        return Result(
            status=status,
            summary=summary,
            curve=curve,
            flops=counter.total + flops_metric + prob.setup_flops,
            n_steps=t,
            diverged_step=diverged_step,
        )


# The registry finds a learner by its folder name and takes this attribute.
TASK = DeepLinearTask
