"""l2o_gd: Math-L2O learned coordinate-wise step sizes for GD on least squares (paper 001), with the
constant-step GD baselines (1/beta, the paper's; 2/(beta+beta_0), spec G4; a given c/beta for Optuna).

An `l2o` run trains the net for `epochs` steps; its curve is per epoch (step = k) and its summary holds
the final improvement ratios, every baseline on the same problems, the spec section 4 diagnostics and
the Thm 4.7 log-margins. A `gd` run is one GD trajectory; its curve is per iteration (step = t).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from tasks.base import FieldType, Result, RunContext, is_diverged
from tasks.l2o_gd.metrics import improvement, ratios
from tasks.l2o_gd.params import SPEC, GDParams, L2OParams
from tasks.l2o_gd.problem import Problem, gd_trajectory, make_problem
from tasks.l2o_gd.train import as_json, baselines, train
from tasks.status import DIVERGED, OK, Status


def problem_of(p: L2OParams | GDParams) -> Problem:
    return make_problem(p.n_problems, p.d, p.b, p.data, p.seed if p.data_seed is None else p.data_seed)


def step_multiplier_of(p: GDParams, prob: Problem) -> float:
    if p.step_rule == "inv_beta":
        return 1.0
    if p.step_rule == "two_over":
        return 2 * prob.beta / (prob.beta + prob.beta0)
    assert p.c is not None
    return p.c


def run_gd(p: GDParams, ctx: RunContext) -> Result:
    prob = problem_of(p)
    base = baselines(prob, p.T, ctx.device, best_c=False)
    c = step_multiplier_of(p, prob)
    m, y = prob.to(torch.float64, ctx.device)
    f_inst = gd_trajectory(m, y, torch.tensor([c], dtype=torch.float64, device=ctx.device), prob.beta, p.T)[0].cpu()
    f = f_inst.sum(-1)
    bad = [t for t in range(p.T + 1) if is_diverged(float(f[t]))]
    status: Status = DIVERGED if bad else OK
    diverged_step = bad[0] if bad else None
    end = bad[0] if bad else p.T
    r = ratios(base["ref"].sum(-1), f)
    curve: dict[str, list[Any]] = {"step": [], "loss": [], "imp_t": []}
    for t in range(end + 1):
        if t % p.log_every and t != end:
            continue
        curve["step"].append(t)
        curve["loss"].append(float(f[t]))
        curve["imp_t"].append(0.0 if t == 0 else float(r[t - 1]))
        if not ctx.report(t, loss=float(f[t])):
            status = ctx.stop_status()
            break
    summary = {k: v for k, v in base.items() if k != "ref"}
    summary["step_c"] = c
    if status != "diverged":
        imp = improvement(base["ref"], f_inst)
        summary.update(
            {
                "F_T_final": float(f[-1]),
                "imp_last": imp.last,
                "imp_mean": imp.mean,
                "imp_last_inst": as_json(imp.last_inst),
                "imp_mean_inst": as_json(imp.mean_inst),
                "imp_last_inst_min": min(imp.last_inst),
                "imp_last_inst_max": max(imp.last_inst),
                "traj_l2o_final": as_json(f),
            }
        )
    flops = end * 8.0 * p.n_problems * p.b * p.d
    return Result(
        status=status,
        summary=summary,
        curve=curve,
        flops=flops,
        n_steps=max(end, 1),
        diverged_step=diverged_step,
    )


def run_l2o(p: L2OParams, ctx: RunContext) -> Result:
    prob = problem_of(p)
    base = baselines(prob, p.T, ctx.device, best_c=p.best_c)
    out = train(p, prob, ctx, base)
    summary = {k: v for k, v in base.items() if k != "ref"}
    summary.update(out.summary)
    summary = {k: v for k, v in summary.items() if not (isinstance(v, float) and math.isnan(v))}
    return Result(
        status=out.status,
        summary=summary,
        curve=out.curve,
        flops=out.flops,
        n_steps=out.n_steps,
        diverged_step=out.diverged_step,
    )


_F: FieldType = "float"
_I: FieldType = "int"
_S: FieldType = "str"


class L2OGDTask:
    name: ClassVar[str] = SPEC.name
    version: ClassVar[str] = SPEC.version  # bump it in params.py, where the driver reads it
    Params: ClassVar[Any] = SPEC.Params
    summary_fields: ClassVar[dict[str, FieldType]] = {
        # problem and baselines (every run)
        "beta": _F,
        "beta0": _F,
        "kappa": _F,
        "c_opt": _F,
        "F_0": _F,
        "F_T_gd": _F,
        "F_T_opt": _F,
        "F_T_inst_beta": _F,
        "imp_last_opt": _F,
        "imp_mean_opt": _F,
        "imp_last_inst_beta": _F,
        "imp_mean_inst_beta": _F,
        "traj_gd": _S,
        "traj_opt": _S,
        "c_best": _F,
        "imp_last_best_c": _F,
        "imp_mean_best_c": _F,
        "step_c": _F,
        # the learner (or the GD run) at the end
        "F_T_final": _F,
        "imp_last": _F,
        "imp_mean": _F,
        "imp_last_inst": _S,
        "imp_mean_inst": _S,
        "imp_last_inst_min": _F,
        "imp_last_inst_median": _F,
        "imp_last_inst_max": _F,
        "imp_mean_inst_median": _F,
        "traj_l2o_final": _S,
        "traj_checkpoints": _S,
        "p_mean_t_final": _S,
        "p_min_final": _F,
        "p_max_final": _F,
        "p_mean_final": _F,
        "p_sat_final": _F,
        "best_imp_last": _F,
        "best_imp_mean": _F,
        "best_imp_mean_epoch": _I,
        # training dynamics (C2) and invariants (C3-C7, C10)
        "non_monotone": _I,
        "rate_fit": _F,
        "log10_ft_ratio": _F,
        "alpha0_gram": _F,
        "alpha0_thin": _F,
        "rank_g0": _I,
        "sigma_max_g0": _F,
        "rank_g_final": _I,
        "alpha_thin_final": _F,
        "alpha_ratio_min": _F,
        "w_ratio_max": _F,
        "lemma42_ratio_max": _F,
        "a3_norm_max": _F,
        "grad_bound_ratio_max": _F,
        # Thm 4.7 in log space (C12) and its constants
        "th_sum_lambda": _F,
        "th_log10_delta2": _F,
        "th_delta3_theta": _F,
        "th_log10_delta4": _F,
        "th_margin_13a": _F,
        "th_margin_13b": _F,
        "th_margin_13c": _F,
        "th_margin_13d": _F,
        "th_log10_eta_max_14a": _F,
        "th_log10_eta_max_14b": _F,
        "th_log10_rate_deficit": _F,
        "th_delta7": _F,
        "lam_bar_1": _F,
        "u_mty": _F,
        "y_norm": _F,
        "eta_eff": _F,
    }
    curve_fields: ClassVar[dict[str, FieldType]] = {
        "loss": _F,
        "imp_last": _F,
        "imp_mean": _F,
        "imp_t": _F,
        "p_min": _F,
        "p_max": _F,
        "p_mean": _F,
        "p_sat": _F,
        "alpha_thin": _F,
        "rank_g": _I,
        "w_ratio_max": _F,
        "w_last_norm": _F,
        "lemma42_ratio": _F,
        "a3_norm": _F,
        "grad_bound_ratio": _F,
    }
    examples: ClassVar[list[dict[str, Any]]] = [
        {
            "algo": "l2o",
            "d": 8,
            "b": 5,
            "n_problems": 3,
            "n1": 8,
            "n2": 24,
            "T": 10,
            "e": 10.0,
            "lr": 1e-4,
            "epochs": 4,
            "log_every": 2,
        },
        {
            "algo": "l2o",
            "d": 6,
            "b": 4,
            "n_problems": 2,
            "depth": 2,
            "n2": 12,
            "T": 8,
            "e": 5.0,
            "lr": 1e-3,
            "epochs": 3,
            "data": "colnorm",
            "dtype": "float32",
            "detach": False,
            "seed": 1,
            "best_c": False,
        },
        {"algo": "gd", "d": 16, "b": 10, "n_problems": 4, "T": 30, "step_rule": "two_over", "data": "gt"},
        {"algo": "gd", "d": 16, "b": 10, "n_problems": 4, "T": 30, "c": 1.5, "log_every": 5},
    ]
    # c = 3.9: the top mode of the instance attaining beta grows by |1 - 3.9| = 2.9 per step, past 1e150
    # within about 330 steps.
    diverging_example: ClassVar[dict[str, Any] | None] = {
        "algo": "gd",
        "d": 16,
        "b": 10,
        "n_problems": 4,
        "T": 600,
        "c": 3.9,
        "log_every": 10,
    }

    def run(self, p: L2OParams | GDParams, ctx: RunContext) -> Result:
        if isinstance(p, GDParams):
            return run_gd(p, ctx)
        return run_l2o(p, ctx)


# The registry finds a learner by its folder name and takes this attribute.
TASK = L2OGDTask
