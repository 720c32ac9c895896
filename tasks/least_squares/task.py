"""least_squares: gradient descent with a constant step on linear least squares.

The simplest convergence experiment there is, and the one whose theory is complete: for
L(W) = 1/2 ||W X - Y||_F^2 with Hessian H = X X^T, constant-step GD converges iff
0 < lr < 2/lambda_max(H), the best constant step is 2/(lambda_max + lambda_min), and the error
contracts per step by max(|1 - lr lambda_min|, |1 - lr lambda_max|). It is the depth-1 baseline of
the deep linear papers, the calibration target of the tuner tests, and the learner of the runner's
overhead benchmark (its cost per step is set by d_in and d_out).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import torch

from tasks.base import Checkpoint, FieldType, FromSpec, Result, RunContext, is_diverged
from tasks.common import generator, torch_dtype, with_singular_values
from tasks.least_squares.params import SPEC, CommonParams, ConstStep, OptimalStep
from tasks.resume_state import by_resume_step
from tasks.status import DIVERGED, OK, Status


def make_problem(p: CommonParams) -> tuple[torch.Tensor, torch.Tensor]:
    """X ~ N(0, 1/d_in) (optionally re-spectrumed to cond(X) = p.cond), Y ~ N(0, 1)."""
    dt = torch_dtype(p.dtype)
    g = generator(p.seed, "least_squares", "data")
    x = torch.randn(p.d_in, p.m, generator=g, dtype=torch.float64) / p.d_in**0.5
    y = torch.randn(p.d_out, p.m, generator=g, dtype=torch.float64)
    if p.cond is not None and min(p.d_in, p.m) > 1:
        r = min(p.d_in, p.m)
        s = torch.logspace(0.0, -torch.log10(torch.tensor(p.cond)).item(), r, dtype=torch.float64)
        x = with_singular_values(x, s * (p.m / p.d_in) ** 0.5)
    return x.to(dt), y.to(dt)


def gd_flops_per_iter(d_in: int, d_out: int) -> float:
    """W Sxx - Syx, the update and the error trace: two d_out x d_in x d_in products + O(d_out d_in)."""
    return 4.0 * d_out * d_in * d_in + 6.0 * d_out * d_in


class LeastSquaresTask(FromSpec, spec=SPEC):
    thread_safe: ClassVar[bool] = True  # own generators, no shared mutable state (tasks.base.is_thread_safe)
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")  # computes on ctx.device (tasks.base.device_for)
    summary_fields: ClassVar[dict[str, FieldType]] = {
        "err_final": "float",
        "err_0": "float",
        "iters_to_tol": "int",
        "lr_used": "float",
        "lr_opt_theory": "float",
        "rate_theory": "float",
        "lambda_max": "float",
        "lambda_min": "float",
        "cond_x": "float",
    }
    curve_fields: ClassVar[dict[str, FieldType]] = {"err": "float", "loss": "float"}
    examples: ClassVar[list[dict[str, Any]]] = [
        {"d_in": 8, "d_out": 2, "m": 30, "n_iters": 50, "lr": 0.1, "seed": 3},
        {"d_in": 10, "d_out": 3, "m": 40, "cond": 10.0, "lr_rule": "optimal", "n_iters": 80},
    ]
    diverging_example: ClassVar[dict[str, Any] | None] = {"d_in": 8, "d_out": 2, "m": 30, "lr": 5.0, "n_iters": 500}

    def growable_budget(self, p: ConstStep | OptimalStep) -> str | None:
        # constant step, no schedule: a longer run's iterates are this run's, then more (tasks.base.Checkpointable)
        return "n_iters"

    def run(self, p: ConstStep | OptimalStep, ctx: RunContext) -> Result:
        # A batch of one: the batched kernels give a member the same bits whatever the batch size (see
        # tasks.deep_linear.batched), so a member of a batch equals its single run exactly.
        return self.run_batch([p], [ctx])[0]

    def batch_key(self, p: ConstStep | OptimalStep) -> Hashable | None:
        if min(p.d_in, p.d_out) < 2:
            return None  # a one-column product: torch's batched kernel then differs in rounding with the batch size
        return (p.d_in, p.d_out, p.dtype)

    def batch_bytes(self, p: ConstStep | OptimalStep) -> int:
        itemsize = 8 if p.dtype == "float64" else 4
        return itemsize * ((p.d_in + p.d_out) * p.m + 2 * p.d_in * p.d_in + 6 * p.d_out * p.d_in)

    def run_batch(self, ps: Sequence[ConstStep | OptimalStep], ctxs: Sequence[RunContext]) -> list[Result]:
        """GD on every member at once (a leading config axis); each member stops, diverges, reports and
        saves its checkpoints on its own, exactly as its single run. Members resuming from different steps
        run as one batch per step (each member's rows compute the same bits whatever its batch)."""
        grouped = by_resume_step(ps, ctxs, self.run_batch)
        if grouped is not None:
            return grouped
        members = [_Member(p, ctx) for p, ctx in zip(ps, ctxs, strict=True)]
        device = ctxs[0].device
        sxx = torch.stack([m.sxx for m in members]).to(device)
        syx = torch.stack([m.syx for m in members]).to(device)
        w_star = torch.stack([m.w_star for m in members]).to(device)
        lr = torch.tensor([m.lr for m in members], dtype=sxx.dtype, device=device).view(-1, 1, 1)
        err0 = _errors(torch.zeros_like(syx) - w_star, sxx)  # the start, W = 0, as the first step computes it
        resumed = ctxs[0].resume is not None
        w = torch.stack([m.restore() for m in members]).to(device) if resumed else torch.zeros_like(syx)
        going = [m.it < m.p.n_iters for m in members]
        saves = any(ctx.checkpointer is not None for ctx in ctxs)  # else no step pays for asking
        for it in range(members[0].it + 1, max(p.n_iters for p in ps) + 1):
            if not any(going):
                break
            w = w - lr * (w @ sxx - syx)
            errs = _errors(w - w_star, sxx)
            for i, member in enumerate(members):
                if going[i]:
                    going[i] = member.step(it, errs[i])
                    if saves and (going[i] or member.ended_by_budget()):
                        going[i] = member.saved(it, w, i, going[i]) and going[i]
        return [member.result(e0) for member, e0 in zip(members, err0, strict=True)]


def _errors(dw: torch.Tensor, sxx: torch.Tensor) -> list[float]:
    """Each member's trace(dW Sxx dW^T), un-normalised."""
    return (dw @ sxx @ dw.mT).diagonal(dim1=-2, dim2=-1).sum(-1).tolist()


class _Member:
    """One config of a batch: its problem and theory up front, its trace and stop rule per step."""

    def __init__(self, p: ConstStep | OptimalStep, ctx: RunContext) -> None:
        self.p, self.ctx = p, ctx
        x, y = make_problem(p)
        self.sxx, self.syx = x @ x.T, y @ x.T
        self.w_star = y @ torch.linalg.pinv(x)
        eig = torch.linalg.eigvalsh(self.sxx.double())
        self.lam_max = float(eig[-1])
        # lambda_min over the range of X: the smallest nonzero eigenvalue governs the error's rate.
        nonzero = eig[eig > self.lam_max * 1e-12]
        self.lam_min = float(nonzero[0])
        self.lr_opt = 2.0 / (self.lam_max + self.lam_min)
        self.lr = p.lr if isinstance(p, ConstStep) else self.lr_opt
        self.loss_star = 0.5 * float(torch.linalg.matrix_norm(self.w_star @ x - y) ** 2)
        self.steps: list[int] = []
        self.errs: list[float] = []
        self.losses: list[float] = []
        self.status: Status = OK
        self.iters_to_tol: int | None = None  # never reached tol: stored as null (issue 28)
        self.diverged_step: int | None = None
        self.it = 0
        self.err = math.nan
        self.budget_row = False  # the last curve row is there only because the budget ended at it

    def restore(self) -> torch.Tensor:
        """Take the books of `ctx.resume` (the state after its step) and return its weights."""
        ckpt = self.ctx.resume
        assert ckpt is not None
        st = ckpt.state
        self.it, self.err = ckpt.step, float(st["err"])
        self.steps, self.errs, self.losses = list(st["steps"]), list(st["errs"]), list(st["losses"])
        if st["budget_row"] and self.p.n_iters > ckpt.step:  # a shorter run's final state, grown: that row
            del self.steps[-1], self.errs[-1], self.losses[-1]  # is not logged by a run that goes on
        w: torch.Tensor = ckpt.tensors["w"]
        return w

    def ended_by_budget(self) -> bool:
        return self.status == OK and self.it == self.p.n_iters and self.iters_to_tol is None

    def saved(self, it: int, w: torch.Tensor, row: int, going: bool) -> bool:
        """Offer the state after iteration `it` (this member's weights: `w[row]`) to `ctx.checkpoint`;
        False when the run was preempted (its state saved), which ends it. `going`: the run continues after
        `it` (else it ended by its budget)."""

        def build() -> Checkpoint:
            state = {"err": self.err, "steps": list(self.steps), "errs": list(self.errs)}
            state.update(losses=list(self.losses), budget_row=self.budget_row)
            return Checkpoint(it, {"w": w[row].detach().to("cpu", copy=True)}, state)

        if self.ctx.checkpoint(it, build, last=not going) or not going:
            return True
        self.status = self.ctx.stop_status()
        return False

    def step(self, it: int, trace: float) -> bool:
        """Account for iteration `it`; False when the run is over."""
        p = self.p
        err = trace / p.m
        self.it, self.err = it, err
        if is_diverged(err):
            self.status, self.diverged_step = DIVERGED, it
            return False
        if it % p.log_every == 0 or err <= p.tol or it == p.n_iters:
            self.budget_row = not (it % p.log_every == 0 or err <= p.tol)
            self.steps.append(it)
            self.errs.append(err)
            self.losses.append(self.loss_star + 0.5 * p.m * err)
            if not self.ctx.report(it, err=err):
                self.status = self.ctx.stop_status()
                return False
        if err <= p.tol:
            self.iters_to_tol = it
            return False
        return it < p.n_iters

    def result(self, trace0: float) -> Result:
        p = self.p
        rate = max(abs(1 - self.lr * self.lam_min), abs(1 - self.lr * self.lam_max))
        return Result(
            status=self.status,
            summary={
                "err_final": self.err,
                "err_0": trace0 / p.m,
                "iters_to_tol": self.iters_to_tol,
                "lr_used": self.lr,
                "lr_opt_theory": self.lr_opt,
                "rate_theory": rate,
                "lambda_max": self.lam_max,
                "lambda_min": self.lam_min,
                "cond_x": (self.lam_max / self.lam_min) ** 0.5,
            },
            curve={"step": self.steps, "err": self.errs, "loss": self.losses},
            flops=self.it * gd_flops_per_iter(p.d_in, p.d_out),
            n_steps=self.it,
            diverged_step=self.diverged_step,
        )


# The registry finds a learner by its folder name and takes this attribute.
TASK = LeastSquaresTask
