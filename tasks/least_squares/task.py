"""least_squares: gradient descent with a constant step on linear least squares.

The simplest convergence experiment there is, and the one whose theory is complete: for
L(W) = 1/2 ||W X - Y||_F^2 with Hessian H = X X^T, constant-step GD converges iff
0 < lr < 2/lambda_max(H), the best constant step is 2/(lambda_max + lambda_min), and the error
contracts per step by max(|1 - lr lambda_min|, |1 - lr lambda_max|). It is the depth-1 baseline of
the deep linear papers, the calibration target of the tuner tests, and the learner of the runner's
overhead benchmark (its cost per step is set by d_in and d_out).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from tasks.base import FieldType, Result, RunContext, is_diverged
from tasks.common import generator, torch_dtype, with_singular_values
from tasks.least_squares.params import SPEC, CommonParams, ConstStep, OptimalStep
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


class LeastSquaresTask:
    name: ClassVar[str] = SPEC.name
    version: ClassVar[str] = SPEC.version  # bump it in params.py, where the driver reads it
    Params: ClassVar[Any] = SPEC.Params
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

    def run(self, p: ConstStep | OptimalStep, ctx: RunContext) -> Result:
        x, y = make_problem(p)
        sxx, syx = x @ x.T, y @ x.T
        w_star = y @ torch.linalg.pinv(x)
        eig = torch.linalg.eigvalsh(sxx.double())
        lam_max = float(eig[-1])
        # lambda_min over the range of X: the smallest nonzero eigenvalue governs the error's rate.
        nonzero = eig[eig > lam_max * 1e-12]
        lam_min = float(nonzero[0])
        lr_opt = 2.0 / (lam_max + lam_min)
        lr = p.lr if isinstance(p, ConstStep) else lr_opt
        rate = max(abs(1 - lr * lam_min), abs(1 - lr * lam_max))
        loss_star = 0.5 * float(torch.linalg.matrix_norm(w_star @ x - y) ** 2)

        def err_of(w: torch.Tensor) -> float:
            dw = w - w_star
            return float(torch.trace(dw @ sxx @ dw.T)) / p.m

        w = torch.zeros(p.d_out, p.d_in, dtype=x.dtype)
        steps: list[int] = []
        errs: list[float] = []
        losses: list[float] = []
        err0 = err_of(w)
        err = err0
        status: Status = OK
        iters_to_tol = -1
        diverged_step = None
        it = 0
        for it in range(1, p.n_iters + 1):
            w = w - lr * (w @ sxx - syx)
            err = err_of(w)
            if is_diverged(err):
                status, diverged_step = DIVERGED, it
                break
            if it % p.log_every == 0 or err <= p.tol or it == p.n_iters:
                steps.append(it)
                errs.append(err)
                losses.append(loss_star + 0.5 * p.m * err)
                if not ctx.report(it, err=err):
                    status = ctx.stop_status()
                    break
            if err <= p.tol:
                iters_to_tol = it
                break
        return Result(
            status=status,
            summary={
                "err_final": err,
                "err_0": err0,
                "iters_to_tol": iters_to_tol,
                "lr_used": lr,
                "lr_opt_theory": lr_opt,
                "rate_theory": rate,
                "lambda_max": lam_max,
                "lambda_min": lam_min,
                "cond_x": (lam_max / lam_min) ** 0.5,
            },
            curve={"step": steps, "err": errs, "loss": losses},
            flops=it * gd_flops_per_iter(p.d_in, p.d_out),
            n_steps=it,
            diverged_step=diverged_step,
        )


# The registry finds a learner by its folder name and takes this attribute.
TASK = LeastSquaresTask
