"""The training loop of sec. 6.3: full-batch gradient descent on F(X_T), one step per epoch.

Epoch k runs the unrolled trajectory with W^k (so the row logged at step k describes W^k: step 0 is
the initialisation, exactly GD), then, for k < epochs, takes W^{k+1} = W^k - lr dF(X_T)/dW^k.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tasks.base import RunContext, is_diverged
from tasks.common import torch_dtype
from tasks.l2o_gd import diagnostics as D
from tasks.l2o_gd import theory as TH
from tasks.l2o_gd.metrics import improvement
from tasks.l2o_gd.model import init_weights
from tasks.l2o_gd.params import L2OParams
from tasks.l2o_gd.problem import Problem, gd_final_batched, gd_trajectory
from tasks.l2o_gd.unroll import Unrolled, unroll
from tasks.status import DIVERGED, OK, Status

NAN = math.nan
DIAG_COLUMNS = (
    "alpha_thin",
    "rank_g",
    "w_ratio_max",
    "w_last_norm",
    "lemma42_ratio",
    "a3_norm",
    "grad_bound_ratio",
    "log10_semi_smooth",
)


def checkpoints(epochs: int, every: int) -> set[int]:
    """Epochs at which trajectories/diagnostics are kept: every `every`, or 0, 1, 2, 5, 10, 20, 50, ...;
    always 0 and the last."""
    if every > 0:
        pts = set(range(0, epochs + 1, every))
    else:
        pts, base = set(), 1
        while base <= epochs:
            pts |= {b * base for b in (1, 2, 5) if b * base <= epochs}
            base *= 10
    return pts | {0, epochs}


def as_json(values: Any) -> str:
    """Trajectories as JSON lists of floats (the store's columns are scalars; spec's list<float>)."""
    return json.dumps([float(v) if math.isfinite(float(v)) else None for v in values])


@dataclass
class Outcome:
    status: Status
    curve: dict[str, list[Any]]
    summary: dict[str, Any]
    n_steps: int
    diverged_step: int | None = None
    flops: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)


def flops_per_epoch(p: L2OParams) -> float:
    """Forward MLP 2 K sum_l n_l n_{l-1} per step, backward about twice that; the problem matvecs 4 N b d
    forward and as many backward (spec section 5)."""
    w = p.widths()
    k = p.n_problems * p.d
    mlp = 2.0 * k * sum(a * b for a, b in zip(w[1:], w[:-1], strict=True))
    return p.T * (3.0 * mlp + 8.0 * p.n_problems * p.b * p.d)


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


def train(p: L2OParams, prob: Problem, ctx: RunContext, base: dict[str, Any]) -> Outcome:
    dev, dt = ctx.device, torch_dtype(p.dtype)
    m, y = prob.to(dt, dev)
    m64, y64 = prob.to(torch.float64, dev)
    ref: torch.Tensor = base["ref"]
    seed = p.seed if p.init_seed is None else p.init_seed
    ws = init_weights(p.widths(), p.e, seed, dt, dev)
    lam_bar = [n + 1.0 for n in D.spectral_norms(ws)]  # C_l = 1 (sec. 5.1)
    u = float(torch.linalg.vector_norm(torch.einsum("nbd,nb->nd", m64, y64)))
    y_norm = float(torch.linalg.vector_norm(y64))
    sum_lam = float(TH.lambdas(prob.beta, u, p.T).sum())
    x_bound = torch.from_numpy(TH.lemma42_bound(prob.beta, u, p.T))
    mode = "detach" if p.detach else "full"
    logged = set(range(0, p.epochs + 1, p.log_every)) | {p.epochs}
    traj_at = checkpoints(p.epochs, p.traj_every)
    diag_at = checkpoints(p.epochs, p.diag_every) if p.diag_every > 0 else {0, p.epochs}
    curve: dict[str, list[Any]] = {
        k: [] for k in ("step", "loss", "imp_last", "imp_mean", "p_min", "p_max", "p_mean", "p_sat", *DIAG_COLUMNS)
    }
    losses: list[float] = []
    trajs: dict[int, list[float]] = {}
    summary: dict[str, Any] = {}
    w_ratio_max, lemma42_max, a3_max, grad_ratio_max = 0.0, 0.0, 0.0, 0.0
    semi_max = semi_last_max = -math.inf  # C11 over all t, and at t = T (where the bound is loosest)
    status: Status
    status, diverged_step, k = OK, None, 0
    best_last, best_mean, best_mean_epoch = -math.inf, -math.inf, 0
    alpha0 = NAN
    last: Unrolled | None = None
    for k in range(p.epochs + 1):
        diag, log = k in diag_at, k in logged
        out = unroll(ws, m, y, prob.beta, p.T, mode=mode, keep=diag, record=diag and k < p.epochs)
        loss = float(out.loss.detach())
        if is_diverged(loss) or any(not torch.isfinite(w).all() for w in ws):
            status, diverged_step = DIVERGED, k
            break
        losses.append(loss)
        grads: list[torch.Tensor] | None = None
        if k < p.epochs or diag:
            grads = list(torch.autograd.grad(out.loss, ws))
        keep_row = log or diag or k in traj_at or k == p.epochs
        # W^k, the weights this epoch's pass used, kept exactly for the float64 evaluation and the diagnostics
        ws_k = [w.detach().clone() for w in ws] if keep_row else []
        if k < p.epochs:
            with torch.no_grad():
                for w, g in zip(ws, grads or [], strict=True):
                    w -= p.lr * g
        if not keep_row:
            continue
        # evaluation in float64 (spec G14): the training pass itself when it already is float64
        ev = out if dt == torch.float64 else _eval64(ws_k, m64, y64, prob, p)
        imp = improvement(ref, ev.f_inst)
        best_last, best_mean = max(best_last, imp.last), max(best_mean, imp.mean)
        if imp.mean >= best_mean:
            best_mean_epoch = k
        ev_loss = float(ev.f_inst[-1].sum())
        row: dict[str, Any] = {
            "step": k,
            "loss": ev_loss,
            "imp_last": imp.last,
            "imp_mean": imp.mean,
            "p_min": out.p_min,
            "p_max": out.p_max,
            "p_mean": out.p_mean,
            "p_sat": out.p_sat,
            **dict.fromkeys(DIAG_COLUMNS, NAN),
            "rank_g": -1,
        }
        if diag:
            spec = D.spectrum(out.hidden_last) if p.svd and out.hidden_last is not None else None
            norms = D.spectral_norms(ws_k)
            w_ratio = max(nrm / lb for nrm, lb in zip(norms[:-1], lam_bar[:-1], strict=True))
            l42 = float((out.x_norm[1:] / x_bound).max())
            a3 = max(D.a3_norm(pp, m64, prob.beta) for pp in (out.p_first, out.p_last) if pp is not None)
            res_norm = math.sqrt(2 * loss)
            bounds = TH.lemma43_bound(prob.beta, lam_bar, sum_lam, res_norm)
            g_ratio = max(D.spectral_norms(grads or [])[i] / bounds[i] for i in range(len(ws)))
            if k == 0 and spec is not None:
                alpha0 = spec.alpha_thin
                summary.update(
                    {
                        "alpha0_gram": spec.alpha_gram,
                        "alpha0_thin": spec.alpha_thin,
                        "rank_g0": spec.rank,
                        "sigma_max_g0": spec.sigma_max,
                    }
                )
            if spec is not None:
                row["alpha_thin"], row["rank_g"] = spec.alpha_thin, spec.rank
            row.update(
                {
                    "w_ratio_max": w_ratio,
                    "w_last_norm": norms[-1],
                    "lemma42_ratio": l42,
                    "a3_norm": a3,
                    "grad_bound_ratio": g_ratio,
                }
            )
            if k < p.epochs:
                semi = _semi_smooth(out, ws_k, ws, m, y, prob, p, lam_bar, u)
                row["log10_semi_smooth"], semi_max = float(semi.max()), max(semi_max, float(semi.max()))
                semi_last_max = max(semi_last_max, float(semi[-1]))
            w_ratio_max, lemma42_max = max(w_ratio_max, w_ratio), max(lemma42_max, l42)
            a3_max, grad_ratio_max = max(a3_max, a3), max(grad_ratio_max, g_ratio)
        for key, val in row.items():
            curve[key].append(val)
        if k in traj_at:  # the curve holds numbers only: trajectories go to one JSON summary field
            trajs[k] = [float(v) for v in ev.f_inst.sum(-1)]
        last = ev
        summary["_last_imp"] = imp
        summary["_last_out"] = out
        if log and not ctx.report(k, loss=ev_loss, imp_last=imp.last, imp_mean=imp.mean):
            status = ctx.stop_status()
            break
    summary["traj_checkpoints"] = json.dumps({str(k): v for k, v in trajs.items()})
    summary.update(_final(summary, curve, losses, last, lam_bar, prob, u, y_norm, p, alpha0))
    summary.update(
        {
            "w_ratio_max": w_ratio_max,
            "lemma42_ratio_max": lemma42_max,
            "a3_norm_max": a3_max,
            "grad_bound_ratio_max": grad_ratio_max,
            "log10_semi_smooth_max": semi_max if semi_max > -math.inf else NAN,
            "log10_semi_smooth_T_max": semi_last_max if semi_last_max > -math.inf else NAN,
            "best_imp_last": best_last,
            "best_imp_mean": best_mean,
            "best_imp_mean_epoch": best_mean_epoch,
        }
    )
    n_steps = max(len(losses) - 1, 0) if status != "diverged" else k
    return Outcome(
        status,
        curve,
        summary,
        max(n_steps, 1) if p.epochs else 1,
        diverged_step,
        flops=max(len(losses), 1) * flops_per_epoch(p),
    )


def _semi_smooth(
    out: Unrolled,
    ws_k: list[torch.Tensor],
    ws: list[torch.Tensor],
    m: torch.Tensor,
    y: torch.Tensor,
    prob: Problem,
    p: L2OParams,
    lam_bar: list[float],
    u: float,
) -> np.ndarray:
    """Lemma 4.5 (spec C11) for the step W^k -> W^{k+1} just taken: log10 of ||X_t^{k+1} - X_t^k|| over the
    lemma's bound, t = 1..T. One extra forward pass with W^{k+1}, at diagnostic epochs only."""
    with torch.no_grad():
        nxt = unroll(ws, m, y, prob.beta, p.T, mode="detach" if p.detach else "full", record=True)
    dx = torch.linalg.vector_norm((torch.stack(nxt.iterates) - torch.stack(out.iterates)).double(), dim=(1, 2))
    dw = D.spectral_norms([w.detach() - w0 for w, w0 in zip(ws, ws_k, strict=True)])
    return TH.log10_semi_smooth_ratios(dx.cpu().numpy(), dw, prob.beta, u, p.T, lam_bar)


def _eval64(ws: list[torch.Tensor], m64: torch.Tensor, y64: torch.Tensor, prob: Problem, p: L2OParams) -> Unrolled:
    with torch.no_grad():
        return unroll([w.double() for w in ws], m64, y64, prob.beta, p.T)


def _final(
    summary: dict[str, Any],
    curve: dict[str, list[Any]],
    losses: list[float],
    last: Unrolled | None,
    lam_bar: list[float],
    prob: Problem,
    u: float,
    y_norm: float,
    p: L2OParams,
    alpha0: float,
) -> dict[str, Any]:
    imp = summary.pop("_last_imp", None)
    out: Unrolled | None = summary.pop("_last_out", None)
    res: dict[str, Any] = {}
    if imp is not None and last is not None and out is not None:
        f_sum = last.f_inst.sum(-1)
        res.update(
            {
                "F_T_final": float(f_sum[-1]),
                "imp_last": imp.last,
                "imp_mean": imp.mean,
                "imp_last_inst": as_json(imp.last_inst),
                "imp_mean_inst": as_json(imp.mean_inst),
                "imp_last_inst_min": min(imp.last_inst),
                "imp_last_inst_median": float(np.median(imp.last_inst)),
                "imp_last_inst_max": max(imp.last_inst),
                "imp_mean_inst_median": float(np.median(imp.mean_inst)),
                "traj_l2o_final": as_json(f_sum),
                "p_mean_t_final": as_json(out.p_mean_t),
                "p_min_final": out.p_min,
                "p_max_final": out.p_max,
                "p_mean_final": out.p_mean,
                "p_sat_final": out.p_sat,
            }
        )
    rank = [r for r in curve["rank_g"] if r >= 0]
    alpha = [a for a in curve["alpha_thin"] if not math.isnan(a)]
    if rank:
        res["rank_g_final"] = rank[-1]
    if alpha:
        res["alpha_thin_final"] = alpha[-1]
        res["alpha_ratio_min"] = min(a / alpha0 for a in alpha) if alpha0 > 0 else NAN
    arr = np.asarray(losses)
    res["non_monotone"] = int((np.diff(arr) > 0).sum()) if arr.size > 1 else 0
    if arr.size > 1 and (arr > 0).all():
        res["rate_fit"] = float(math.exp(np.polyfit(np.arange(arr.size), np.log(arr), 1)[0]))
        res["log10_ft_ratio"] = float(math.log10(arr[-1] / arr[0]))
    res.update(TH.thm47(prob.beta, prob.beta0, u, y_norm, p.T, lam_bar, alpha0, p.lr))
    sv = torch.linalg.svdvals(prob.m).numpy()
    res["th_delta7"] = TH.delta7(sv, prob.beta, p.T)
    res.update(
        {
            "lam_bar_1": lam_bar[0],
            "u_mty": u,
            "y_norm": y_norm,
            "eta_eff": p.lr * p.e ** (2 * (p.depth - 1)),
        }
    )
    return res
