"""One l2o run's bookkeeping inside a training batch (`tasks.l2o_gd.train.train_batch`): its problem and
initial weights, the float64 evaluation of each epoch's row, the spec section 4 diagnostics, its checkpoints,
and the summary and `Outcome` it ends with. Everything but the batch's forward and backward pass."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import torch

from tasks.base import Checkpoint, Outcome, RunContext, is_diverged
from tasks.common import torch_dtype
from tasks.l2o_gd import diagnostics as D
from tasks.l2o_gd import theory as TH
from tasks.l2o_gd.baselines import as_json
from tasks.l2o_gd.metrics import Improvement, improvement
from tasks.l2o_gd.model import init_weights
from tasks.l2o_gd.params import L2OParams
from tasks.l2o_gd.problem import Problem
from tasks.l2o_gd.unroll import Unrolled, unroll
from tasks.status import DIVERGED, OK, PREEMPTED, Status

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


def flops_per_epoch(p: L2OParams) -> float:
    """Forward MLP 2 K sum_l n_l n_{l-1} per step, backward about twice that; the problem matvecs 4 N b d
    forward and as many backward (spec section 5)."""
    w = p.widths()
    k = p.n_problems * p.d
    mlp = 2.0 * k * sum(a * b for a, b in zip(w[1:], w[:-1], strict=True))
    return p.T * (3.0 * mlp + 8.0 * p.n_problems * p.b * p.d)


class Member:
    """One run's state inside `train_batch`: everything but the forward and backward pass."""

    def __init__(self, p: L2OParams, prob: Problem, ctx: RunContext, base: dict[str, Any]) -> None:
        self.p, self.prob, self.ctx = p, prob, ctx
        self.dt = torch_dtype(p.dtype)
        self.m, self.y = prob.to(self.dt, ctx.device)
        self.m64, self.y64 = prob.to(torch.float64, ctx.device)
        self.ref: torch.Tensor = base["ref"]
        seed = p.seed if p.init_seed is None else p.init_seed
        self.ws0 = [w.detach() for w in init_weights(p.widths(), p.e, seed, self.dt, ctx.device)]
        self.lam_bar = [n + 1.0 for n in D.spectral_norms(self.ws0)]  # C_l = 1 (sec. 5.1)
        self.u = float(torch.linalg.vector_norm(torch.einsum("nbd,nb->nd", self.m64, self.y64)))
        self.y_norm = float(torch.linalg.vector_norm(self.y64))
        self.sum_lam = float(TH.lambdas(prob.beta, self.u, p.T).sum())
        self.x_bound = torch.from_numpy(TH.lemma42_bound(prob.beta, self.u, p.T))
        self.mode = "detach" if p.detach else "full"
        self.logged = set(range(0, p.epochs + 1, p.log_every)) | {p.epochs}
        self.traj_at = checkpoints(p.epochs, p.traj_every)
        self.diag_at = checkpoints(p.epochs, p.diag_every) if p.diag_every > 0 else {0, p.epochs}
        self.curve: dict[str, list[Any]] = {
            key: []
            for key in ("step", "loss", "imp_last", "imp_mean", "p_min", "p_max", "p_mean", "p_sat", *DIAG_COLUMNS)
        }
        self.losses: list[float] = []
        self.trajs: dict[int, list[float]] = {}
        self.summary: dict[str, Any] = {}
        self.w_ratio_max = self.lemma42_max = self.a3_max = self.grad_ratio_max = 0.0
        self.semi_max = self.semi_last_max = -math.inf  # C11 over all t, and at t = T (where the bound is loosest)
        self.status: Status = OK
        self.diverged_step: int | None = None
        self.k = 0
        self.best_last = self.best_mean = -math.inf
        self.best_mean_epoch = 0
        self.alpha0 = NAN
        self.head: dict[str, Any] = {}  # the summary's part from the last row (`_final_head`)
        self.done = False
        self.w_start = self.ws0  # the weights training starts from: W^0, or a checkpoint's

    def checkpoint(self, step: int, ws: list[torch.Tensor]) -> Checkpoint:
        """The state before epoch `step`'s pass: W^step, and the rows, losses and running maxima of the
        epochs before it (the problem, the baselines and W^0 come back from the seeds)."""
        tensors = {f"w.{layer}": w.detach().to("cpu", copy=True) for layer, w in enumerate(ws)}
        state = {
            "curve": {k: list(v) for k, v in self.curve.items()},
            "losses": list(self.losses),
            "trajs": {str(k): list(v) for k, v in self.trajs.items()},
            "summary": dict(self.summary),
            "head": dict(self.head),
            "maxima": [self.w_ratio_max, self.lemma42_max, self.a3_max, self.grad_ratio_max],
            "semi": [self.semi_max, self.semi_last_max],
            "best": [self.best_last, self.best_mean, self.best_mean_epoch],
            "alpha0": self.alpha0,
        }
        return Checkpoint(step, tensors, state)

    def restore(self, ckpt: Checkpoint) -> None:
        st = ckpt.state
        self.w_start = [ckpt.tensors[f"w.{layer}"].to(self.m.device, copy=True) for layer in range(len(self.ws0))]
        self.curve = {k: list(v) for k, v in st["curve"].items()}
        self.losses = list(st["losses"])
        self.trajs = {int(k): list(v) for k, v in st["trajs"].items()}
        self.summary, self.head = dict(st["summary"]), dict(st["head"])
        self.w_ratio_max, self.lemma42_max, self.a3_max, self.grad_ratio_max = st["maxima"]
        self.semi_max, self.semi_last_max = st["semi"]
        self.best_last, self.best_mean, self.best_mean_epoch = st["best"]
        self.alpha0 = st["alpha0"]
        self.k = max(ckpt.step - 1, 0)

    def save(self, step: int, ws: list[torch.Tensor]) -> None:
        """`ctx.checkpoint` before epoch `step`'s pass (the run's last save: `step == epochs`; its final
        pass, which only evaluates, comes after it, so a longer run goes on from there)."""
        if not self.ctx.checkpoint(step, lambda: self.checkpoint(step, ws), last=step == self.p.epochs):
            self.status, self.done = self.ctx.stop_status(), True

    def alive(self, k: int, out: Unrolled, ws: list[torch.Tensor]) -> bool:
        """Epoch k's pass: False (and done) when the loss or the weights W^k diverged."""
        self.k = k
        loss = float(out.loss.detach())
        if is_diverged(loss) or any(not torch.isfinite(w).all() for w in ws):
            self.status, self.diverged_step, self.done = DIVERGED, k, True
            return False
        self.losses.append(loss)
        self.done = k == self.p.epochs
        return True

    def keeps_row(self, k: int) -> bool:
        return k in self.logged or k in self.diag_at or k in self.traj_at or k == self.p.epochs

    def observe(
        self, k: int, out: Unrolled, grads: list[torch.Tensor], ws_k: list[torch.Tensor], ws_next: list[torch.Tensor]
    ) -> None:
        """Epoch k's row: the float64 evaluation, the diagnostics at diagnostic epochs, the report."""
        p, prob = self.p, self.prob
        # evaluation in float64 (spec G14): the training pass itself when it already is float64
        ev = out if self.dt == torch.float64 else _eval64(ws_k, self.m64, self.y64, prob, p)
        imp = improvement(self.ref, ev.f_inst)
        self.best_last, self.best_mean = max(self.best_last, imp.last), max(self.best_mean, imp.mean)
        if imp.mean >= self.best_mean:
            self.best_mean_epoch = k
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
        if k in self.diag_at:
            row.update(self._diagnostics(k, out, grads, ws_k, ws_next))
        for key, val in row.items():
            self.curve[key].append(val)
        if k in self.traj_at:  # the curve holds numbers only: trajectories go to one JSON summary field
            self.trajs[k] = [float(v) for v in ev.f_inst.sum(-1)]
        self.head = _final_head(imp, out, ev)
        if k in self.logged and not self.ctx.report(k, loss=ev_loss, imp_last=imp.last, imp_mean=imp.mean):
            self.status, self.done = self.ctx.stop_status(), True

    def _diagnostics(
        self, k: int, out: Unrolled, grads: list[torch.Tensor], ws_k: list[torch.Tensor], ws_next: list[torch.Tensor]
    ) -> dict[str, Any]:
        p, prob, lam_bar = self.p, self.prob, self.lam_bar
        spec = D.spectrum(out.hidden_last) if p.svd and out.hidden_last is not None else None
        norms = D.spectral_norms(ws_k)
        w_ratio = max(nrm / lb for nrm, lb in zip(norms[:-1], lam_bar[:-1], strict=True))
        l42 = float((out.x_norm[1:] / self.x_bound).max())
        a3 = max(D.a3_norm(pp, self.m64, prob.beta) for pp in (out.p_first, out.p_last) if pp is not None)
        bounds = TH.lemma43_bound(prob.beta, lam_bar, self.sum_lam, math.sqrt(2 * self.losses[-1]))
        g_norms = D.spectral_norms(grads)
        g_ratio = max(g_norms[i] / bounds[i] for i in range(len(grads)))
        row: dict[str, Any] = {}
        if k == 0 and spec is not None:
            self.alpha0 = spec.alpha_thin
            self.summary.update(
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
            semi = _semi_smooth(out, ws_k, ws_next, self.m, self.y, prob, p, lam_bar, self.u)
            row["log10_semi_smooth"], self.semi_max = float(semi.max()), max(self.semi_max, float(semi.max()))
            self.semi_last_max = max(self.semi_last_max, float(semi[-1]))
        self.w_ratio_max, self.lemma42_max = max(self.w_ratio_max, w_ratio), max(self.lemma42_max, l42)
        self.a3_max, self.grad_ratio_max = max(self.a3_max, a3), max(self.grad_ratio_max, g_ratio)
        return row

    def outcome(self) -> Outcome:
        p, summary = self.p, self.summary
        if self.status == PREEMPTED:  # saved: the runner stores nothing of this attempt
            return Outcome(self.status, {}, {}, 0)
        summary["traj_checkpoints"] = json.dumps({str(k): v for k, v in self.trajs.items()})
        summary.update(self.head)
        summary.update(
            _final(
                self.curve,
                self.losses,
                self.lam_bar,
                self.prob,
                self.u,
                self.y_norm,
                p,
                self.alpha0,
            )
        )
        summary.update(
            {
                "w_ratio_max": self.w_ratio_max,
                "lemma42_ratio_max": self.lemma42_max,
                "a3_norm_max": self.a3_max,
                "grad_bound_ratio_max": self.grad_ratio_max,
                "log10_semi_smooth_max": self.semi_max if self.semi_max > -math.inf else NAN,
                "log10_semi_smooth_T_max": self.semi_last_max if self.semi_last_max > -math.inf else NAN,
                "best_imp_last": self.best_last,
                "best_imp_mean": self.best_mean,
                "best_imp_mean_epoch": self.best_mean_epoch,
            }
        )
        n_steps = max(len(self.losses) - 1, 0) if self.status != DIVERGED else self.k
        return Outcome(
            self.status,
            self.curve,
            summary,
            max(n_steps, 1) if p.epochs else 1,
            self.diverged_step,
            flops=max(len(self.losses), 1) * flops_per_epoch(p),
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


def _final_head(imp: Improvement, out: Unrolled, last: Unrolled) -> dict[str, Any]:
    """The summary's fields from the last row kept (plain data: a checkpoint carries them)."""
    f_sum = last.f_inst.sum(-1)
    return {
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


def _final(
    curve: dict[str, list[Any]],
    losses: list[float],
    lam_bar: list[float],
    prob: Problem,
    u: float,
    y_norm: float,
    p: L2OParams,
    alpha0: float,
) -> dict[str, Any]:
    res: dict[str, Any] = {}
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
