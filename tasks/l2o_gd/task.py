"""l2o_gd: Math-L2O learned coordinate-wise step sizes for GD on least squares (paper 001), with the
constant-step GD baselines (1/beta, the paper's; 2/(beta+beta_0), spec G4; a given c/beta for Optuna).

An `l2o` run trains the net for `epochs` steps; its curve is per epoch (step = k) and its summary holds
the final improvement ratios, every baseline on the same problems, the spec section 4 diagnostics and
the Thm 4.7 log-margins. A `gd` run is one GD trajectory; its curve is per iteration (step = t).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import torch

from tasks.base import Checkpoint, FieldType, FromSpec, Result, RunContext, is_diverged
from tasks.l2o_gd.baselines import as_json, baseline_multipliers, baseline_summary, baselines
from tasks.l2o_gd.metrics import improvement, ratios
from tasks.l2o_gd.params import SPEC, GDParams, L2OParams
from tasks.l2o_gd.problem import Problem, gd_trajectory, make_problem
from tasks.l2o_gd.train import train_batch
from tasks.resume_state import by_resume_step
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


def gd_batch_key(p: GDParams) -> Hashable:
    """What fixes a GD run's shapes; members of a batch differ in seed, data_seed, step rule, c and log_every.
    (`dtype` is not in it: GD runs in float64 whatever it says, spec G14.)"""
    return ("gd", p.n_problems, p.d, p.b, p.data, p.T)


def run_gd_batch(ps: Sequence[GDParams], ctxs: Sequence[RunContext]) -> list[Result]:
    """GD runs of one batch key as one computation: the members' instances side by side form one
    block-diagonal problem (instances never interact, each keeps its own run's beta), and every member's
    four trajectories (its step and the three baselines of `baseline_multipliers`) run as one batch. A single
    run is a batch of one, so both paths are the same code."""
    if len({gd_batch_key(p) for p in ps}) != 1 or len(ps) != len(ctxs):
        raise ValueError(f"run_gd_batch needs one context per member and one batch key, got {len(ps)} members")
    if ctxs[0].resume is not None:  # one step per batch (by_resume_step), never 0 for GD: all resume, from their end
        return [Result(**ctx.resume.state["result"]) for ctx in ctxs if ctx.resume is not None]
    device, n, T = ctxs[0].device, ps[0].n_problems, ps[0].T
    probs = [problem_of(p) for p in ps]
    steps = [step_multiplier_of(p, prob) for p, prob in zip(ps, probs, strict=True)]
    mult = torch.cat(
        [
            torch.cat([baseline_multipliers(prob), torch.full((1, n), c, dtype=torch.float64)])
            for prob, c in zip(probs, steps, strict=True)
        ],
        dim=1,
    )  # (4, K N): the reference, 2/(beta+beta_0), 1/beta_i, the member's own step
    beta = torch.tensor([prob.beta for prob in probs], dtype=torch.float64).repeat_interleave(n).reshape(-1, 1)
    m = torch.cat([prob.m for prob in probs]).to(device)
    y = torch.cat([prob.y for prob in probs]).to(device)
    f = gd_trajectory(m, y, mult.to(device), beta.to(device), T).cpu().reshape(4, T + 1, len(ps), n)
    return [
        _gd_result(p, ctx, prob, c, f[:, :, i])
        for i, (p, ctx, prob, c) in enumerate(zip(ps, ctxs, probs, steps, strict=True))
    ]


def gd_batch_bytes(p: GDParams) -> int:
    """Device memory of one member: its problem, four iterates with their residuals and gradients, and the
    four stored trajectories (float64)."""
    n, b, d = p.n_problems, p.b, p.d
    return 8 * (n * b * d + n * b + 4 * 3 * n * (b + d) + 4 * (p.T + 1) * n)


def _gd_result(p: GDParams, ctx: RunContext, prob: Problem, c: float, f: torch.Tensor) -> Result:
    """One GD run's result from its trajectories (4, T+1, N) in `run_gd_batch`'s order."""
    base = baseline_summary(prob, f[0], f[1], f[2])
    f_inst = f[3]
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
    result = Result(
        status=status,
        summary=summary,
        curve=curve,
        flops=flops,
        n_steps=max(end, 1),
        diverged_step=diverged_step,
    )
    return _saved_whole(result, ctx)


def _saved_whole(result: Result, ctx: RunContext) -> Result:
    """A GD run's one checkpoint: its trajectories are one pass of T iterations costing less than a training
    epoch of the learner, so its state is its result (at its last step), which a resumed attempt returns."""
    if result.status not in (OK, DIVERGED):
        return result

    def build() -> Checkpoint:
        fields = ("status", "summary", "curve", "flops", "n_steps", "diverged_step")
        state = {k: getattr(result, k) for k in fields}
        state["curve"] = {k: list(v) for k, v in result.curve.items()}
        return Checkpoint(result.n_steps, {}, {"result": state})

    return result if ctx.checkpoint(result.n_steps, build, last=True) else Result(status=ctx.stop_status())


def l2o_batch_key(p: L2OParams) -> Hashable:
    """What fixes a learner run's shapes, precision and epoch loop; members of a batch differ in seed,
    data_seed, init_seed, e, lr and what they log (log_every, traj_every, diag_every, svd, best_c)."""
    return ("l2o", p.n_problems, p.d, p.b, p.data, p.T, p.dtype, p.depth, p.n1, p.n2, p.epochs, p.detach)


def l2o_batch_bytes(p: L2OParams) -> int:
    """Device memory of one member: the autograd graph of T unrolled steps keeps every hidden activation of the
    N d coordinates, T K (n_1 + ... + n_{L-1}) numbers (spec section 5: ~21 GB for the main run in float32), plus
    a few per-coordinate vectors per step (x, g, the features, P), one step's temporaries in the backward pass,
    and the problem."""
    itemsize = 4 if p.dtype == "float32" else 8
    k, hidden = p.n_problems * p.d, sum(p.widths()[1:-1])
    return itemsize * (p.T * k * (hidden + 8) + 2 * k * hidden + 2 * p.n_problems * p.b * p.d)


def run_l2o_batch(ps: Sequence[L2OParams], ctxs: Sequence[RunContext]) -> list[Result]:
    """Learner runs of one batch key trained as one batched computation (`train_batch`); a single run is a
    batch of one."""
    if len({l2o_batch_key(p) for p in ps}) != 1 or len(ps) != len(ctxs):
        raise ValueError(f"run_l2o_batch needs one context per member and one batch key, got {len(ps)} members")
    probs = [problem_of(p) for p in ps]
    bases = [baselines(prob, p.T, ctx.device, best_c=p.best_c) for p, prob, ctx in zip(ps, probs, ctxs, strict=True)]
    results = []
    for base, out in zip(bases, train_batch(ps, probs, ctxs, bases), strict=True):
        summary = {k: v for k, v in base.items() if k != "ref"}
        summary.update(out.summary)
        summary = {k: v for k, v in summary.items() if not (isinstance(v, float) and math.isnan(v))}
        results.append(
            Result(
                status=out.status,
                summary=summary,
                curve=out.curve,
                flops=out.flops,
                n_steps=out.n_steps,
                diverged_step=out.diverged_step,
            )
        )
    return results


_F: FieldType = "float"
_I: FieldType = "int"
_S: FieldType = "str"


class L2OGDTask(FromSpec, spec=SPEC):
    thread_safe: ClassVar[bool] = True  # own generators, no shared mutable state (tasks.base.is_thread_safe)
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
        "log10_semi_smooth_max": _F,
        "log10_semi_smooth_T_max": _F,
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
        "log10_semi_smooth": _F,
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
        return self.run_batch([p], [ctx])[0]

    def growable_budget(self, p: L2OParams | GDParams) -> str | None:
        """l2o: `epochs`. Full-batch GD on the weights at a constant rate, no random draw after the init; the
        cadences (log_every, traj_every, diag_every, the 1-2-5 points) fix the same epochs below any total, and
        what a run does at its last epoch only (its last row, diagnostics and trajectory) follows its last
        checkpoint, so a longer run redoes it where it is not last.
        gd: None. The whole horizon T is one pass whose checkpoint is its result; a longer T would need
        the iterates, and recomputing costs less than storing them."""
        return "epochs" if isinstance(p, L2OParams) else None

    def batch_key(self, p: L2OParams | GDParams) -> Hashable:
        return gd_batch_key(p) if isinstance(p, GDParams) else l2o_batch_key(p)

    def batch_bytes(self, p: L2OParams | GDParams) -> int:
        return gd_batch_bytes(p) if isinstance(p, GDParams) else l2o_batch_bytes(p)

    def run_batch(self, ps: Sequence[L2OParams | GDParams], ctxs: Sequence[RunContext]) -> list[Result]:
        """Members of one batch key (the executor groups them so); a mixed list runs key by key, in order."""
        out: dict[int, Result] = {}
        for key in dict.fromkeys(self.batch_key(p) for p in ps):
            idx = [i for i, p in enumerate(ps) if self.batch_key(p) == key]
            gd = [p for i in idx if isinstance(p := ps[i], GDParams)]
            l2o = [p for i in idx if isinstance(p := ps[i], L2OParams)]
            sub = [ctxs[i] for i in idx]
            if gd:
                results = by_resume_step(gd, sub, run_gd_batch) or run_gd_batch(gd, sub)
            else:
                results = by_resume_step(l2o, sub, run_l2o_batch) or run_l2o_batch(l2o, sub)
            out.update(zip(idx, results, strict=True))
        return [out[i] for i in range(len(ps))]


# The registry finds a learner by its folder name and takes this attribute.
TASK = L2OGDTask
