"""ldminv: learnable matrix inverse (LD-Minv) and D-SVD (paper 000, "Fast and differentiable matrix
inverse and its extension to SVD").

algo=minv: K layers X <- X sum_l C_{k,l} (I - A X)^l from X0 = A^T/c0 (or a fixed D-Minv warm start),
C trained on the deep-supervised loss Eq. 4 by SGD (the paper) or Adam; C == 1 is fixed D-Minv (the
order-L hyper-power method, L = 2 Newton-Schulz), always evaluated on the same test set as a baseline.
Two computations: the batched matrix path and the exact spectral simulator (fast, for large grids).
algo=dsvd: D-SVD, Cayley steps on the Stiefel manifold with LD-Minv inside (Table 3).
Each run records the theory's predictions for its config (Lemma 1, Prop. 1, Prop. 4, slopes).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

from tasks.base import FieldType, FromSpec, Result, RunContext, one_batch_key
from tasks.common import torch_dtype
from tasks.ldminv.params import SPEC, DsvdParams, MinvParams
from tasks.ldminv.train_dsvd import run_dsvd, run_dsvd_batch
from tasks.ldminv.train_minv import MinvOutcome, run_minv, run_minv_batch
from tasks.resume_state import by_resume_step


class LdminvTask(FromSpec, spec=SPEC):
    thread_safe: ClassVar[bool] = True  # own generators, no shared mutable state (tasks.base.is_thread_safe)
    summary_fields: ClassVar[dict[str, FieldType]] = {
        # minv
        "test_loss": "float",
        "log10_test_loss": "float",
        "neg_log10_test_loss": "float",
        "test_loss_dminv": "float",
        "log10_test_loss_dminv": "float",
        "test_loss_init": "float",
        "log10_gain_vs_dminv": "float",
        "test_loss_eq4": "float",
        "train_loss_final": "float",
        "log10_train_loss_final": "float",
        "gen_gap": "float",
        "max_abs_c_dev": "float",
        "max_abs_c_dev_init": "float",
        "coeffs_json": "str",
        "iters_to_tol": "int",
        "grad_init_max": "float",
        "fwd_equiv": "int",
        "slope_pred_frob": "float",
        "c0_mean": "float",
        "at_floor": "bool",
        "diverged": "bool",
        "x_norm_max": "float",
        "e0_max": "float",
        "e_inf_final": "float",
        "prop4_bound": "float",
        "order_empirical": "float",
        "lemma1_max_rel_err": "float",
        "lemma1_max_abs_err": "float",
        "lemma1_layers_checked": "int",
        "prop1_max_residual": "float",
        # issue 43 (tasks/ldminv/lemma2_facts.py): Thm 2's test noise, Lemma 2's facts on the training pool
        "test_loss_eq4_se": "float",
        "lemma2_orders_json": "str",
        "lemma2_scan_n": "int",
        "lemma2_scan_max": "float",
        "lemma2_scan_absmax": "float",
        "lemma2_grad0_json": "str",
        "lemma2_grad1_json": "str",
        "lemma2_loss_at_one": "float",
        "lemma2_drop_at_one": "float",
        "lemma2_probe_min_at_one": "float",
        # dsvd
        "test_obj": "float",
        "svd_mse_sum": "float",
        "svd_mse_mean": "float",
        "orth_err": "float",
        "svd_mse_sum_init": "float",
        "neg_step_frac": "float",
        "t_offsets_json": "str",
    }
    curve_fields: ClassVar[dict[str, FieldType]] = {
        "train_loss": "float",
        "test_loss": "float",
        "lr": "float",
        "max_abs_c_dev": "float",
        "grad_norm": "float",
    }
    examples: ClassVar[list[dict[str, Any]]] = [
        {
            "algo": "minv",
            "rows": 20,
            "cols": 20,
            "K": 3,
            "L": 4,
            "iters": 20,
            "n_train": 200,
            "batch": 20,
            "n_test": 20,
            "optimizer": "adam",
            "lr": 1e-3,
            "log_every": 5,
        },
        {
            "algo": "minv",
            "path": "matrix",
            "rows": 8,
            "cols": 12,
            "rank": 5,
            "K": 3,
            "L": 3,
            "iters": 4,
            "n_train": 20,
            "batch": 10,
            "n_test": 5,
            "coeff_init": "uniform",
            "theory_checks": True,
            "log_every": 2,
        },
        {
            "algo": "minv",
            "data": "usv_uniform",
            "kappa": 10.0,
            "rows": 16,
            "cols": 16,
            "K": 4,
            "L": 10,
            "c0_rule": "fro",
            "iters": 0,
            "n_test": 20,
        },
        {
            "algo": "minv",
            "model": "warmup",
            "rows": 10,
            "cols": 10,
            "K": 4,
            "L": 4,
            "c0_factor": 1.1,
            "iters": 10,
            "n_train": 1,
            "batch": 1,
            "n_test": 1,
            "lr": 1e-2,
            "lr_halve_every": 0,
            "log_every": 5,
        },
        {
            "algo": "dsvd",
            "m": 6,
            "n_hat": 10,
            "K_svd": 2,
            "K_inv": 3,
            "L_inv": 4,
            "iters": 2,
            "n_train": 8,
            "batch": 4,
            "n_test": 4,
            "inner_iters": 1,
            "log_every": 1,
        },
    ]
    # SGD at lr 1e3 throws the coefficients far outside |C - 1| < 1, where (I - AX)^l explodes: the
    # training loss passes 1e150 (or NaN) within a few steps (spec 6.6: SGD at lr 1 already gives NaN).
    diverging_example: ClassVar[dict[str, Any] | None] = {
        "algo": "minv",
        "rows": 20,
        "cols": 20,
        "K": 6,
        "L": 8,
        "iters": 50,
        "n_train": 100,
        "batch": 50,
        "n_test": 10,
        "lr": 1e3,
        "lr_halve_every": 0,
        "c0_rule": "fro",
    }

    def run(self, p: MinvParams | DsvdParams, ctx: RunContext) -> Result:
        out = run_minv(p, ctx) if isinstance(p, MinvParams) else run_dsvd(p, ctx)
        return _result(out)

    def growable_budget(self, p: MinvParams | DsvdParams) -> str | None:
        """`iters` for both: the learning rate is constant or halves every `lr_halve_every` iterations (a
        period of its own, not a fraction of the budget), the batch order and fresh matrices come from
        generators the checkpoint carries, and the curve's one budget-bound row (the last iteration's)
        is dropped when a shorter run's state goes on."""
        return "iters"

    def batch_key(self, p: MinvParams | DsvdParams) -> Hashable | None:
        """What fixes the stacked shapes and the step: LD-Minv's path, model, sizes, batch and optimiser;
        D-SVD's sizes, inner inverse, step rule, inner iterations, batch and optimiser. Members differ in
        seeds, data law and scale, X0 rule, coefficient init, learning rates and schedule, budgets."""
        if isinstance(p, DsvdParams):
            sizes = (p.m, p.n_hat, p.r, p.K_svd, p.K_inv, p.L_inv, p.batch, p.n_train, p.n_test)
            return ("dsvd", p.dtype, *sizes, p.inverse, p.step_rule, p.inner_iters, p.optimizer)
        return ("minv", p.path, p.model, p.dtype, p.rows, p.cols, p.K, p.L, p.batch, p.n_test, p.n_train, p.optimizer)

    def batch_bytes(self, p: MinvParams | DsvdParams) -> int:
        """Device memory of one member: its train pool and test set (LD-Minv: matrices or singular values
        with X0 or e0; D-SVD: M, U0, V0) and the autograd graph of one training step (LD-Minv: about
        L + 3 saved tensors per layer; D-SVD: per layer and side, the inner LD-Minv's and the Cayley step's
        square matrices of both sides)."""
        if isinstance(p, DsvdParams):
            r = p.r or min(p.m, p.n_hat)
            per = p.m * p.n_hat + (p.m + p.n_hat) * r
            squares = p.m * p.m + p.n_hat * p.n_hat
            floats = (p.n_train + p.n_test) * per + p.K_svd * (p.K_inv * (p.L_inv + 3) + 8) * p.batch * squares
            return floats * torch_dtype(p.dtype).itemsize
        per = p.rows * p.cols if p.path == "matrix" else min(p.rows, p.cols)
        floats = 2 * ((p.n_train or 0) + p.n_test) * per + p.K * (p.L + 3) * p.batch * per
        return floats * torch_dtype(p.dtype).itemsize

    def run_batch(self, ps: Sequence[MinvParams | DsvdParams], ctxs: Sequence[RunContext]) -> list[Result]:
        one_batch_key("ldminv", (self.batch_key(p) for p in ps))
        grouped = by_resume_step(ps, ctxs, self.run_batch)
        if grouped is not None:
            return grouped
        if isinstance(ps[0], DsvdParams):
            outs = run_dsvd_batch([p for p in ps if isinstance(p, DsvdParams)], ctxs)
        else:
            outs = run_minv_batch([p for p in ps if isinstance(p, MinvParams)], ctxs)
        return [_result(out) for out in outs]


def _result(out: MinvOutcome) -> Result:
    return Result(
        status=out.status,  # type: ignore[arg-type]  # the outcome holds a Status, typed as str
        summary=out.summary,
        curve={k: list(v) for k, v in out.curve.items()},
        flops=out.flops,
        n_steps=out.n_steps,
        diverged_step=out.diverged_step,
    )


# The registry finds a learner by its folder name and takes this attribute.
TASK = LdminvTask
