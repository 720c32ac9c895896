"""The constant-step GD baselines every l2o run is compared with on its own problems (sec. 6.5, spec G4):
1/beta (the paper's reference), 2/(beta+beta_0), per-instance 1/beta_i, and the best constant c/beta."""

from __future__ import annotations

import json
import math
from typing import Any

import torch

from tasks.l2o_gd.metrics import improvement
from tasks.l2o_gd.problem import Problem, gd_final_batched, gd_trajectory


def as_json(values: Any) -> str:
    """Trajectories as JSON lists of floats (the store's columns are scalars; spec's list<float>)."""
    return json.dumps([float(v) if math.isfinite(float(v)) else None for v in values])


def baselines(prob: Problem, T: int, device: str, best_c: bool) -> dict[str, Any]:
    """GD with 1/beta (the reference), 2/(beta+beta_0), per-instance 1/beta_i, and the best constant c/beta."""
    m, y = prob.to(torch.float64, device)
    c_opt = 2 * prob.beta / (prob.beta + prob.beta0)
    two = gd_trajectory(m, y, torch.tensor([1.0, c_opt], dtype=torch.float64, device=device), prob.beta, T).cpu()
    inst = gd_trajectory(m, y, (prob.beta / prob.beta_inst).reshape(1, -1).to(device), prob.beta, T)[0].cpu()
    out = baseline_summary(prob, two[0], two[1], inst)
    if best_c:
        cs = torch.linspace(0.5, 2.2, 341, dtype=torch.float64)
        ft = gd_final_batched(m, y, cs.to(device), prob.beta, T).sum(-1).cpu()
        ft = torch.where(torch.isfinite(ft), ft, torch.full_like(ft, math.inf))
        i = int(torch.argmin(ft))
        imp_best = improvement(out["ref"], gd_trajectory(m, y, cs[i : i + 1].to(device), prob.beta, T)[0].cpu())
        out.update({"c_best": float(cs[i]), "imp_last_best_c": imp_best.last, "imp_mean_best_c": imp_best.mean})
    return out


def baseline_multipliers(prob: Problem) -> torch.Tensor:
    """The baselines' step multipliers per instance, (3, N): 1 (the reference), 2 beta/(beta + beta_0), and
    beta/beta_i (per-instance 1/beta_i)."""
    n = prob.beta_inst.shape[0]
    c_opt = 2 * prob.beta / (prob.beta + prob.beta0)
    ones = torch.ones(n, dtype=torch.float64)
    return torch.stack([ones, ones * c_opt, prob.beta / prob.beta_inst])


def baseline_summary(prob: Problem, ref: torch.Tensor, opt: torch.Tensor, inst: torch.Tensor) -> dict[str, Any]:
    """The baselines' summary fields from their per-instance trajectories (T+1, N), and `ref` itself."""
    imp_opt, imp_inst = improvement(ref, opt), improvement(ref, inst)
    return {
        "ref": ref,
        "beta": prob.beta,
        "beta0": prob.beta0,
        "kappa": prob.beta / prob.beta0,
        "c_opt": 2 * prob.beta / (prob.beta + prob.beta0),
        "F_0": float(ref[0].sum()),
        "F_T_gd": float(ref[-1].sum()),
        "F_T_opt": float(opt[-1].sum()),
        "F_T_inst_beta": float(inst[-1].sum()),
        "imp_last_opt": imp_opt.last,
        "imp_mean_opt": imp_opt.mean,
        "imp_last_inst_beta": imp_inst.last,
        "imp_mean_inst_beta": imp_inst.mean,
        "traj_gd": as_json(ref.sum(-1)),
        "traj_opt": as_json(opt.sum(-1)),
    }
