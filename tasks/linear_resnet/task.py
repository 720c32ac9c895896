"""linear_resnet: deep linear ResNets with fixed input/output transforms (Zou, Long & Gu, ICLR 2020).

f(x) = B (I+W_L)...(I+W_1) A x with A, B fixed and the hidden W_l zero-initialised, trained by GD or
SGD on the sum loss 1/2 ||f(X) - Y||_F^2; the baseline is the standard deep linear net
B W_L...W_1 A x with Gaussian W_l (Du & Hu 2019). Reproduces Fig. 1 (transforms; ResNet vs standard
net over depth) and records, per run, the theory's step sizes, rate and condition margin so that
analysis can test the depth-, width-, kappa- and batch-size scalings without the task code.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import torch

from tasks.base import FieldType, FromSpec, Result, RunContext, one_batch_key
from tasks.common import generator, torch_dtype
from tasks.linear_resnet import flops as F
from tasks.linear_resnet import theory as T
from tasks.linear_resnet.data import make_problem
from tasks.linear_resnet.model import init_hidden, prefixes
from tasks.linear_resnet.params import SPEC, GDParams, SGDParams
from tasks.linear_resnet.train import Outcome, Setup, run_gd, run_sgd
from tasks.linear_resnet.transforms import make_transforms
from tasks.resume_state import by_resume_step
from tasks.status import PREEMPTED

F64 = torch.float64


def hidden_init(p: GDParams | SGDParams, dtype: torch.dtype) -> list[torch.Tensor]:
    resnet = p.model == "resnet"
    seed = p.seed if p.init_seed is None else p.init_seed
    gens = None if resnet else [generator(seed, "linear_resnet", "W", layer) for layer in range(p.depth)]
    return init_hidden(p.depth, p.m, resnet, p.w_var, gens, dtype)


def build(p: GDParams | SGDParams) -> tuple[Setup, dict[str, Any]]:
    """Data, transforms, initial weights and the step size; plus the config's theory constants."""
    prob = make_problem(p)
    tf = make_transforms(p)
    resnet = p.model == "resnet"
    w0 = hidden_init(p, F64)
    d0 = tf.b @ prefixes(w0, tf.a, resnet)[-1] - prob.phi
    loss0 = prob.loss_star + 0.5 * float(((d0 @ prob.sigma) * d0).sum())
    sgd = isinstance(p, SGDParams)
    n_over_b = p.n / p.batch_size if isinstance(p, SGDParams) else 1.0
    if isinstance(p, SGDParams):
        eta_theory = T.sgd_step_thm38(
            p.batch_size, p.n, p.depth, tf.mu_a, tf.mu_b, tf.lam_a, tf.lam_b, prob.norm_x, prob.sigma_r, p.n_iters
        )
    else:
        eta_theory = T.gd_step_proof(p.depth, tf.lam_a, tf.lam_b, prob.norm_x, loss0)
    if p.step_rule == "normalized":
        assert p.c is not None
        eta = T.normalized_step(p.c, p.depth, tf.lam_a, tf.lam_b, prob.norm_x)
    elif p.step_rule == "given":
        assert p.eta is not None
        eta = p.eta
    else:
        eta = eta_theory
    # Thm 3.8 (the SGD theorem used here) assumes L* = 0 and has sqrt(L0) and an extra n/B.
    margin = T.margin(
        tf.mu_a, tf.mu_b, tf.lam_a, tf.lam_b, prob.norm_x, prob.sigma_r, loss0, 0.0 if sgd else prob.loss_star, n_over_b
    )
    theory = {
        "loss_0": loss0,
        "loss_star": prob.loss_star,
        "y_sq_half": 0.5 * prob.y_sq,
        "eta_used": eta,
        "c_used": eta * p.depth * tf.lam_a**2 * tf.lam_b**2 * prob.norm_x**2,
        "theorem": "3.8" if sgd else "3.1",
        "eta_theory": eta_theory,
        "eta_ratio": eta / eta_theory,
        "eta_bound_thm31": T.gd_step_bound(p.depth, tf.lam_a, tf.lam_b, prob.norm_x, loss0),
        "rate_theory": T.contraction(eta, p.depth, tf.mu_a, tf.mu_b, prob.sigma_r),
        "margin": margin,
        "margin_required": T.C_PROOF,
        "condition_holds": bool(margin >= T.C_PROOF),
        "alpha_min_theory": T.alpha_min_modified_identity(prob.norm_x, prob.sigma_r, prob.y_sq, prob.loss_star),
        "pl_lower_bound": T.pl_lower(tf.mu_a, tf.mu_b, prob.sigma_r),
        "grad_upper_bound": T.grad_upper(tf.lam_a, tf.lam_b, prob.norm_x),
        "lam_a": tf.lam_a,
        "mu_a": tf.mu_a,
        "lam_b": tf.lam_b,
        "mu_b": tf.mu_b,
        "norm_x": prob.norm_x,
        "sigma_r": prob.sigma_r,
        "kappa_x": prob.kappa,
        "rank_x": prob.rank,
        "norm_xf": prob.norm_xf,
        "norm_x2inf": prob.norm_x2inf,
    }
    dt = torch_dtype(p.dtype)
    batch_gen = None
    if isinstance(p, SGDParams):
        batch_gen = generator(p.seed if p.batch_seed is None else p.batch_seed, "linear_resnet", "batch")
    setup = Setup(
        x=prob.x.to(dt),
        y=prob.y.to(dt),
        sigma=prob.sigma.to(dt),
        phi=prob.phi.to(dt),
        a=tf.a.to(dt),
        b=tf.b.to(dt),
        w0=[w.to(dt) for w in w0],
        eta=eta,
        loss_star=prob.loss_star,
        loss0=loss0,
        batch_gen=batch_gen,
    )
    return setup, theory


def active_width(ws: list[torch.Tensor], w0: list[torch.Tensor]) -> int:
    """Hidden coordinates i whose row or column moved in some layer (identity: max(d, k); modified
    identity: d + k; Gaussian: m)."""
    moved = torch.zeros(ws[0].shape[0], dtype=torch.bool)
    for w, w_init in zip(ws, w0, strict=True):
        dw = (w - w_init) != 0
        moved |= dw.any(dim=1) | dw.any(dim=0)
    return int(moved.sum())


def summarize(out: Outcome, theory: dict[str, Any], flops_per_step: float, setup: Setup) -> dict[str, Any]:
    tr = out.trace
    rel_final = tr.rel(tr.last_excess)
    hit = tr.first[1e-6]
    t_rate, rel_rate = (hit, tr.rel_at_first[1e-6]) if hit is not None and hit > 0 else (tr.last_step, rel_final)
    rate = rel_rate ** (1.0 / t_rate) if t_rate > 0 and rel_rate > 0 and math.isfinite(rel_rate) else math.nan
    # SGD with L* > 0 stalls at a noisy level: average the logged points of the last fifth of the run.
    steps, sub = tr.curve["step"], tr.curve["subopt"]
    tail_vals = [v for st, v in zip(steps, sub, strict=True) if st >= 0.8 * tr.last_step]
    tail = sum(tail_vals) / len(tail_vals) if tail_vals else math.nan
    summary = dict(theory)
    summary.update(
        {
            "loss_final": tr.loss_star + tr.last_excess,
            "subopt_final": tr.last_excess,
            "rel_subopt_final": rel_final,
            "best_loss": tr.loss_star + tr.best_excess,
            "rel_subopt_best": tr.rel(tr.best_excess),
            "subopt_tail": tail,
            "iters_rel_1e2": tr.first[1e-2],
            "iters_rel_1e4": tr.first[1e-4],
            "iters_rel_1e6": tr.first[1e-6],
            "diverged": out.status == "diverged",
            "rate_measured": rate,
            "w_dist_final": tr.curve["w_dist"][-1] if tr.curve["w_dist"] else math.nan,
            "active_width": active_width(out.ws, setup.w0),
            "flops_per_step": flops_per_step,
        }
    )
    return summary


class LinearResNetTask(FromSpec, spec=SPEC):
    thread_safe: ClassVar[bool] = True  # own generators, no shared mutable state (tasks.base.is_thread_safe)
    summary_fields: ClassVar[dict[str, FieldType]] = {
        "loss_0": "float",
        "loss_star": "float",
        "y_sq_half": "float",
        "loss_final": "float",
        "subopt_final": "float",
        "rel_subopt_final": "float",
        "best_loss": "float",
        "rel_subopt_best": "float",
        "subopt_tail": "float",
        "iters_rel_1e2": "int",
        "iters_rel_1e4": "int",
        "iters_rel_1e6": "int",
        "diverged": "bool",
        "rate_measured": "float",
        "eta_used": "float",
        "c_used": "float",
        "theorem": "str",
        "eta_theory": "float",
        "eta_ratio": "float",
        "eta_bound_thm31": "float",
        "rate_theory": "float",
        "margin": "float",
        "margin_required": "float",
        "condition_holds": "bool",
        "alpha_min_theory": "float",
        "pl_lower_bound": "float",
        "grad_upper_bound": "float",
        "lam_a": "float",
        "mu_a": "float",
        "lam_b": "float",
        "mu_b": "float",
        "norm_x": "float",
        "sigma_r": "float",
        "kappa_x": "float",
        "rank_x": "int",
        "norm_xf": "float",
        "norm_x2inf": "float",
        "w_dist_final": "float",
        "active_width": "int",
        "flops_per_step": "float",
    }  # fmt: skip - one example per line reads as a table
    curve_fields: ClassVar[dict[str, FieldType]] = {
        "loss": "float",
        "subopt": "float",
        "rel_subopt": "float",
        "best_loss": "float",
        "grad_norm": "float",
        "pl_ratio": "float",
        "w_dist": "float",
    }  # fmt: skip - one example per line reads as a table
    examples: ClassVar[list[dict[str, Any]]] = [
        {"algo": "gd", "m": 20, "depth": 3, "n": 100, "n_iters": 60, "log_every": 5},
        {
            "algo": "gd",
            "model": "standard",
            "form": "direct",
            "m": 16,
            "depth": 4,
            "n": 80,
            "n_iters": 40,
            "c": 0.3,
            "seed": 2,
        },
        {
            "algo": "sgd",
            "transform": "modified_identity",
            "alpha": 2.0,
            "m": 20,
            "depth": 3,
            "n": 100,
            "batch_size": 20,
            "sampling": "reshuffle",
            "n_iters": 60,
            "log_every": 5,
        },
        {
            "algo": "sgd",
            "transform": "identity",
            "form": "direct",
            "m": 12,
            "depth": 2,
            "n": 60,
            "batch_size": 15,
            "n_iters": 40,
            "step_rule": "theory",
            "seed": 1,
        },
    ]  # fmt: skip - one example per line reads as a table
    # eta = 0.005 is c ~ 27 in normalised units; GD on this problem is stable up to c ~ 6 and diverges
    # from c ~ 10 (the loss passes 1e150 within a few steps).
    diverging_example: ClassVar[dict[str, Any] | None] = {
        "algo": "gd",
        "m": 20,
        "depth": 3,
        "n": 100,
        "eta": 0.005,
        "n_iters": 200,
    }  # fmt: skip - one example per line reads as a table

    def run(self, p: GDParams | SGDParams, ctx: RunContext) -> Result:
        return self.run_batch([p], [ctx])[0]

    def growable_budget(self, p: GDParams | SGDParams) -> str | None:
        """`n_iters`, but for SGD at the theory's step: Thm 3.8's step size is a function of the number of
        iterations, so a longer run takes other steps from the first on. Otherwise the step is constant, the
        minibatch order comes from the checkpoint's generator, the curve's cadence does not see the budget
        and the last iteration (its row) follows the last save; `subopt_tail`, the mean over the last fifth,
        is read off the whole curve at the end."""
        if isinstance(p, SGDParams) and p.step_rule == "theory":
            return None
        return "n_iters"

    def batch_key(self, p: GDParams | SGDParams) -> Hashable | None:
        """What fixes the tensor shapes and the loop: members differ in seeds, transform, step size,
        target and noise (their own data and A, B ride in the stack), iteration budget and cadence."""
        batch = p.batch_size if isinstance(p, SGDParams) else None
        return (p.algo, p.model, p.form, p.dtype, p.d, p.k, p.n, p.m, p.depth, batch)

    def batch_bytes(self, p: GDParams | SGDParams) -> int:
        """Device memory of one member: data, Gram matrices and transforms, weights with their start and
        gradients, the prefixes (gram) or the activations of all samples or the minibatch (direct)."""
        m, d, k, n, depth = p.m, p.d, p.k, p.n, p.depth
        floats = (d + k) * n + d * d + k * d + m * (d + k) + 3 * depth * m * m + (depth + 1) * m * (d + k)
        samples = p.batch_size if isinstance(p, SGDParams) else n
        if isinstance(p, SGDParams):
            floats += (d + k) * samples
        if p.form == "direct":
            floats += (depth + 3) * m * samples + 2 * k * samples
        return floats * torch_dtype(p.dtype).itemsize

    def run_batch(self, ps: Sequence[GDParams | SGDParams], ctxs: Sequence[RunContext]) -> list[Result]:
        one_batch_key("linear_resnet", (self.batch_key(p) for p in ps))
        grouped = by_resume_step(ps, ctxs, self.run_batch)
        if grouped is not None:
            return grouped
        built = [build(p) for p in ps]
        setups = [setup for setup, _ in built]
        p0 = ps[0]
        resnet = p0.model == "resnet"
        if isinstance(p0, SGDParams):
            outs = run_sgd([p for p in ps if isinstance(p, SGDParams)], setups, ctxs)
            per_step = F.sgd_step(p0.m, p0.d, p0.k, p0.depth, p0.batch_size, p0.form, resnet).total
        else:
            outs = run_gd([p for p in ps if isinstance(p, GDParams)], setups, ctxs)
            per_step = F.gd_step(p0.m, p0.d, p0.k, p0.depth, p0.n, p0.form, resnet).total
        return [
            Result(status=out.status)  # type: ignore[arg-type]  # saved: the runner stores nothing of it
            if out.status == PREEMPTED
            else Result(
                status=out.status,  # type: ignore[arg-type]  # Outcome.status holds a Status, typed as str
                summary=summarize(out, theory, per_step, setup),
                curve={k: list(v) for k, v in out.trace.curve.items()},
                flops=out.flops,
                n_steps=out.n_steps,
                diverged_step=out.diverged_step,
            )
            for out, (setup, theory) in zip(outs, built, strict=True)
        ]


# The registry finds a learner by its folder name and takes this attribute.
TASK = LinearResNetTask
