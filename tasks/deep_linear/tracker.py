"""One deep_linear run around its learner: the setup before the first iteration (data, optimum, init,
the theory's predictions) and the bookkeeping after each (error trace, curve, early stop, divergence,
pruning, the summary). The learner itself only yields end-to-end matrices: one config at a time
(`DeepLinearTask.run`, for the algorithms the batched path does not cover) with a Tracker, or many
configs stacked on a leading axis (`tasks.deep_linear.batched`) with a BatchTracker
(`tasks.deep_linear.batch_tracker`), which applies the same rules to all members at once with array
operations, so a batched member is judged exactly as one Tracker would judge it. Both build their Result
with `make_result`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from tasks.base import Checkpoint, FieldType, Result, RunContext, is_diverged
from tasks.common import torch_dtype
from tasks.deep_linear import theory
from tasks.deep_linear.bcsgd import BCSGDStats
from tasks.deep_linear.data import Problem, make_problem
from tasks.deep_linear.flops import FlopCounter
from tasks.deep_linear.gd import du_hu_lr
from tasks.deep_linear.init import end_to_end, init_weights, init_weights_many
from tasks.deep_linear.objective import L2Objective, L4Objective
from tasks.deep_linear.params import AnyParams, BCGDParams, BCSGDParams, GDParams
from tasks.status import DIVERGED, OK, Status

INCREASE_RTOL = 1e-10  # an iteration "increases" the error when err_new > err_old (1 + this) ...
NOISE_FLOOR = 1e-20  # ... and err_old > this * err_0: below it (float64 floor ~1e-29) changes are rounding
NAN = math.nan
_TENSORS = ("x", "y", "sxx", "syx", "xh", "sv", "w_ls", "w_star")
# A Tracker's running books that a Result (`Final`) and a checkpoint (`Tracker.state`) both carry
BOOKS = ("t", "err", "err_min", "iters_to_tol", "flops_to_tol", "n_inc", "max_inc", "ratio_max", "violations")


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


@dataclass
class Setup:
    """Everything a run has before its first iteration, on the run's device."""

    prob: Problem
    ws: list[torch.Tensor]
    obj: L2Objective | L4Objective
    summary: dict[str, Any]
    lr_const: float  # the constant step of GD / const-rule BCGD, NaN otherwise
    per_sweep: int  # iterations per sweep: L for the layer-wise learners, 1 for GD
    err0: float


def initial_weights(ps: Sequence[AnyParams]) -> list[list[torch.Tensor]]:
    """Each run's initial weights (`init_weights` per run; a batch of one shape and init, drawn together)."""
    p = ps[0]
    if len(ps) > 1 and all((q.init, q.layer_widths(), q.dtype) == (p.init, p.layer_widths(), p.dtype) for q in ps):
        return init_weights_many(
            p.init,
            p.layer_widths(),
            [q.init_seed_eff() for q in ps],
            torch_dtype(p.dtype),
            balanced_std=p.balanced_std,
            random_std=p.random_std,
        )
    return [
        init_weights(
            q.init,
            q.layer_widths(),
            q.init_seed_eff(),
            torch_dtype(q.dtype),
            balanced_std=q.balanced_std,
            random_std=q.random_std,
        )
        for q in ps
    ]


def prepare(
    p: AnyParams, summary_fields: dict[str, FieldType], device: str = "cpu", ws: list[torch.Tensor] | None = None
) -> Setup:
    """Data, optimum and initial weights (`ws`, where the caller drew them with `initial_weights`), drawn on
    the CPU (the seeded generators live there, so a run's numbers do not depend on where it computes) and
    moved to `device`; the theory's predictions."""
    prob = make_problem(p)
    if ws is None:
        (ws,) = initial_weights([p])
    summary: dict[str, Any] = {k: NAN for k, t in summary_fields.items() if t == "float"}
    summary.update(theory_summary(p, prob, end_to_end(ws)))
    if device != "cpu":
        prob = dataclasses.replace(prob, **{k: getattr(prob, k).to(device) for k in _TENSORS})
        ws = [w.to(device) for w in ws]
    l4 = isinstance(p, BCGDParams) and p.loss == "l4"
    obj = L4Objective(prob) if l4 else L2Objective(prob)
    lr_const = NAN
    if isinstance(p, GDParams):
        lr_const = du_hu_lr(prob, p.L) if p.lr_rule == "du_hu" else float(p.lr)  # type: ignore[arg-type]  # set for const (validator)
    elif isinstance(p, BCGDParams) and p.lr_rule == "const":
        lr_const = float(p.lr)  # type: ignore[arg-type]  # set for const (validator)
    per_sweep = 1 if isinstance(p, GDParams) else p.L
    return Setup(prob, ws, obj, summary, lr_const, per_sweep, obj.err(end_to_end(ws)))


class Tracker:
    """One run's bookkeeping: `start()` before the first iteration, `step(...)` after each (False: the
    run is over), `result()` at the end. Flops are read from `counter` (the learner's, shared by a
    batch whose members all count alike) when the run stops, so a member that stops early keeps its own."""

    def __init__(self, p: AnyParams, setup: Setup, counter: FlopCounter, ctx: RunContext) -> None:
        self.p, self.setup, self.counter, self.ctx = p, setup, counter, ctx
        self.curve: dict[str, list[Any]] = {k: [] for k in ("step", "err", "loss", "lr", "layer", "sweep", "flops")}
        self.status: Status = OK
        self.diverged_step: int | None = None
        self.t = 0
        self.prev = self.err = self.err_min = setup.err0
        # None until the error reaches tol: a run that never does stores null, not a number (issue 28)
        self.iters_to_tol: int | None = None
        self.flops_to_tol = NAN
        self.n_inc, self.max_inc = 0, 0.0
        self.ratio_max, self.violations = NAN, 0
        self.lrs: list[float] = []
        self.tail_start = int(math.ceil(p.n_iters * (1 - getattr(p, "tail_frac", 0.25))))
        self.tail_sum, self.tail_n = 0.0, 0
        self.flops_learner = 0.0
        self.budget_row = False  # the last curve row is there only because the budget ended at it

    def state(self) -> dict[str, Any]:
        """The books after iteration `self.t`, as plain data (a checkpoint's `state`, tasks.base.Checkpoint):
        with the weights and the counter's total, what a run resumed there needs to go on bit for bit.
        A BatchTracker gives a member's books in the same form (`BatchTracker.member_state`), so a member
        saved in a batch resumes alone and the other way round."""
        return dict(
            self._books(),
            curve={k: list(v) for k, v in self.curve.items()},
            lrs=list(self.lrs),
            tail_sum=self.tail_sum,
            tail_n=self.tail_n,
            err_sweep1=float(self.setup.summary["err_sweep1"]),
            flops=self.counter.total,
            budget_row=self.budget_row,
        )

    def restore(self, state: dict[str, Any]) -> None:
        """Take the books of `state` (see `state`; the counter's total too) instead of starting."""
        st = resumed_state(state, self.p.n_iters)
        self.curve, self.lrs = st["curve"], st["lrs"]
        for name in BOOKS:
            setattr(self, name, st[name])
        self.prev = self.err  # the error before the next iteration (a final state's `prev` is a step behind)
        self.tail_sum, self.tail_n = st["tail_sum"], st["tail_n"]
        self.setup.summary["err_sweep1"] = st["err_sweep1"]
        self.counter.total = self.flops_learner = st["flops"]  # the latter read where the run ends at once

    def _books(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in BOOKS}

    def ended_by_budget(self) -> bool:
        """The run stopped because its budget ran out (not at tol, not diverged, not stopped)."""
        at_tol = self.iters_to_tol == self.t and self.p.stop_at_tol
        return self.status == OK and self.t == self.p.n_iters and not at_tol

    def _log(self, step: int, err: float, lr: float, layer: int) -> None:
        c = self.curve
        c["step"].append(step)
        c["err"].append(err)
        c["loss"].append(self.setup.obj.loss(err))
        c["lr"].append(lr)
        c["layer"].append(layer)
        c["sweep"].append(step / self.setup.per_sweep)
        c["flops"].append(self.counter.total)

    def _stop(self) -> bool:
        self.flops_learner = self.counter.total
        return False

    def stop(self) -> bool:
        """End the run here (after a preemption saved its state): False, as `step` answers at an end."""
        return self._stop()

    def start(self) -> bool:
        """Log step 0 and report it; False when the run must not even start (pruned or past its deadline)."""
        self._log(0, self.setup.err0, NAN, 0)
        if not self.ctx.report(0, err=self.setup.err0):
            self.status = self.ctx.stop_status()
            return self._stop()
        return True

    def step(self, t: int, err: float, lr: float, layer: int, gamma2: float = NAN) -> bool:
        """Account for iteration `t` (error after it, its step and layer); False when the run is over."""
        p, prob = self.p, self.setup.prob
        self.t, self.err = t, err
        self.lrs.append(lr)
        if is_diverged(err):
            self.status, self.diverged_step = DIVERGED, t
            self._log(t, err, lr, layer)
            return self._stop()
        prev, err0 = self.prev, self.setup.err0
        noisy = prev <= NOISE_FLOOR * abs(err0)
        if err > prev * (1 + INCREASE_RTOL) and not noisy:
            self.n_inc += 1
            self.max_inc = max(self.max_inc, (err - prev) / abs(prev) if prev != 0 else math.inf)
        if not math.isnan(gamma2) and prob.err_offset == 0.0 and not noisy:
            ratio = (err / prev) / gamma2 if gamma2 > 0 else (math.inf if err > 1e-24 else 0.0)
            self.ratio_max = ratio if math.isnan(self.ratio_max) else max(self.ratio_max, ratio)
            self.violations += int(ratio > 1 + 1e-8)
        self.err_min = min(self.err_min, err)
        if t == self.setup.per_sweep:
            self.setup.summary["err_sweep1"] = err
        if t > self.tail_start:
            self.tail_sum, self.tail_n = self.tail_sum + err, self.tail_n + 1
        crossed = self.iters_to_tol is None and err <= p.tol
        if crossed:
            self.iters_to_tol, self.flops_to_tol = t, self.counter.total
        done = t == p.n_iters or (crossed and p.stop_at_tol)
        if t % p.log_every == 0 or crossed or done:
            self.budget_row = not (t % p.log_every == 0 or crossed)
            self._log(t, err, lr, layer)
            if not self.ctx.report(t, err=err):
                self.status = self.ctx.stop_status()
                return self._stop()
        if done:
            return self._stop()
        self.prev = err
        return True

    def result(self, stats: BCSGDStats | None = None) -> Result:
        lrs = np.array(self.lrs, dtype=np.float64).reshape(-1, 1)
        final = Final(
            **self._books(),
            status=self.status,
            diverged_step=self.diverged_step,
            lr_median=float(finite_lower_median(lrs, np.array([len(self.lrs)]))[0]),
            err_tail=self.tail_sum / self.tail_n if self.tail_n else NAN,
            flops_learner=self.flops_learner,
            curve=self.curve,
        )
        return make_result(self.p, self.setup, final, stats)


def weight_tensors(ws: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """One run's weights as a checkpoint's tensors (on the CPU, copied: the run goes on changing them)."""
    return {f"w{j}": w.detach().to("cpu", copy=True) for j, w in enumerate(ws)}


def restored_weights(ckpt: Checkpoint) -> list[torch.Tensor]:
    """The weights of a checkpoint made by `weight_tensors`, in layer order."""
    depth = sum(1 for k in ckpt.tensors if k.startswith("w"))
    return [ckpt.tensors[f"w{j}"] for j in range(depth)]


def resumed_state(state: dict[str, Any], n_iters: int) -> dict[str, Any]:
    """`state` as a run with budget `n_iters` goes on from it: a shorter run's final state (its budget
    grown) loses the curve row that only its budget's end logged."""
    st = dict(state)
    st["curve"] = {k: list(v) for k, v in state["curve"].items()}
    st["lrs"] = list(state["lrs"])
    if st["budget_row"] and n_iters > st["t"]:
        for column in st["curve"].values():
            del column[-1]
    return st


@dataclass
class Final:
    """A run's bookkeeping when it stops: what its Result is made of, from a Tracker (one run) or a
    BatchTracker (a member of a batch)."""

    status: Status
    diverged_step: int | None
    t: int  # the last iteration accounted for
    err: float  # the error after it
    err_min: float
    iters_to_tol: int | None  # None: the error never reached tol
    flops_to_tol: float
    n_inc: int
    max_inc: float
    ratio_max: float
    violations: int
    lr_median: float  # of the finite steps taken
    err_tail: float
    flops_learner: float
    curve: dict[str, list[Any]]


def finite_lower_median(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per column j: the median of the finite values among its first counts[j] rows, the lower of the two
    middle ones for an even count (torch.median's rule), NaN where there is none."""
    rows, cols = values.shape
    if rows == 0:
        return np.full(cols, NAN)
    valid = np.isfinite(values) & (np.arange(rows)[:, None] < counts)
    k = valid.sum(axis=0)
    ranked = np.sort(np.where(valid, values, np.inf), axis=0)
    middle = ranked[np.maximum(k - 1, 0) // 2, np.arange(cols)]
    return np.where(k > 0, middle, NAN)


def make_result(p: AnyParams, s: Setup, f: Final, stats: BCSGDStats | None = None) -> Result:
    """The Result of a run that stopped with `f`: its summary (the setup's, completed) and curve."""
    prob, obj, t, err = s.prob, s.obj, f.t, f.err
    summary = s.summary
    flops_metric = (t + 1) * obj.flops_per_eval  # the error is evaluated at the start and after every iteration
    summary.update(
        {
            "err_0": s.err0,
            "err_final": err,
            "err_min": f.err_min,
            "loss_final": obj.loss(err),
            "loss_star": obj.loss_star,
            "iters_to_tol": f.iters_to_tol,
            "sweeps_to_tol": f.iters_to_tol / s.per_sweep if f.iters_to_tol is not None else NAN,
            "flops_to_tol": f.flops_to_tol,
            "n_increase": f.n_inc,
            "frac_increase": f.n_inc / t if t else 0.0,
            "max_rel_increase": f.max_inc,
            "lr_used": s.lr_const,
            "lr_median": f.lr_median,
            "lr_du_hu": du_hu_lr(prob, p.L),
            "cond_x": prob.cond_x,
            "kappa_x": prob.kappa_x,
            "rank_x": prob.r_x,
            "cond_attempts": prob.cond_attempts,
            "min_width": min(p.layer_widths()),
            "w_star_fro": float(torch.linalg.matrix_norm(obj.w_star if isinstance(obj, L4Objective) else prob.w_star)),
            "l4_grad_rel": obj.grad_rel if isinstance(obj, L4Objective) else NAN,
            "thm32_max_ratio": f.ratio_max,
            # null where not checked: a sentinel -1 read as a count (a mean, a max over runs) lies
            "thm32_violations": f.violations if isinstance(p, BCGDParams) and p.check_thm32 else None,
            "err_tail": f.err_tail,
            "flops_learner": f.flops_learner,
            "flops_metric": flops_metric,
            "flops_setup": prob.setup_flops,
            "flops_per_iter": f.flops_learner / t if t else 0.0,
            "data_sha256": prob.sha256,
        }
    )
    if isinstance(p, BCSGDParams) and stats is not None:
        assert p.eta_bar is not None  # BCSGDParams' validator rejects None
        half_loss_star = 0.5 * prob.loss_star * prob.m  # L(W*) of the halved loss, un-normalised
        low, upp = theory.bcsgd_floors(
            float(p.eta_bar), half_loss_star, stats.m_upp, stats.m_low, stats.gamma_low, stats.gamma_upp, p.L
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
        status=f.status,
        summary=summary,
        curve=f.curve,
        flops=f.flops_learner + flops_metric + prob.setup_flops,
        n_steps=t,
        diverged_step=f.diverged_step,
    )
