"""ldminv as a task: params validation, training behaviour, divergence as a result, GPU path."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from runner.grid.identity import validate_params
from tasks.base import RunContext
from tasks.ldminv.data import DataSpec, Source
from tasks.ldminv.task import LdminvTask

TASK = LdminvTask()


def run(ctx: RunContext | None = None, **raw: Any) -> Any:
    return TASK.run(validate_params(TASK, raw), ctx or RunContext())


@pytest.mark.parametrize(
    "raw",
    [
        {"data": "usv_uniform"},  # needs kappa
        {"kappa": 3.0},  # gauss takes no kappa
        {"coeff_init": "given", "K": 2, "L": 4, "coeffs": [1.0, 1.0]},  # wrong length
        {"coeff_init": "dminv", "delta": 0.1},  # delta only for perturb
        {"theory_checks": True},  # matrix path only
        {"n_train": 10, "batch": 20},
        {"L": 1},
        {"rank": 200},
        {"algo": "dsvd", "r": 80},
        {"algo": "dsvd", "K": 3},  # a minv field
    ],
)
def test_bad_params_are_rejected(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        validate_params(TASK, raw)


def test_given_coefficients_all_one_equal_fixed_dminv() -> None:
    base = {"rows": 16, "cols": 24, "K": 3, "L": 4, "iters": 0, "n_test": 10, "n_train": 50, "batch": 10}
    given = run(**base, coeff_init="given", coeffs=[1.0] * 12).summary
    assert given["test_loss"] == given["test_loss_dminv"] == given["test_loss_init"]


def test_same_matrices_in_both_paths() -> None:
    spec = DataSpec("gauss", 6, 9, 4, "std", None)
    mats = Source(spec, 3, "test").matrices(5)
    sv = Source(spec, 3, "test").singular_values(5)
    assert torch.allclose(torch.linalg.svdvals(mats), sv)
    assert int((sv > 1e-10).sum(-1).max()) == 4
    usv = DataSpec("usv_uniform", 8, 8, None, "std", 10.0)
    s = Source(usv, 1, "test").singular_values(50)
    assert float(s.min()) >= 0.1 and float(s.max()) <= 1.0
    assert torch.allclose(
        torch.linalg.svdvals(Source(usv, 1, "test").matrices(3)).sort(-1).values, s[:3].sort(-1).values
    )


def test_matrix_and_spectral_paths_agree_on_a_trained_run() -> None:
    base = {
        "rows": 12,
        "cols": 12,
        "K": 3,
        "L": 4,
        "iters": 5,
        "n_train": 20,
        "batch": 10,
        "n_test": 6,
        "optimizer": "adam",
        "lr": 1e-2,
        "coeff_init": "uniform",
    }
    s, m = run(**base).summary, run(**base, path="matrix").summary
    assert math.isclose(s["test_loss"], m["test_loss"], rel_tol=1e-10)
    assert s["coeffs_json"][:60] == m["coeffs_json"][:60]


def test_adam_beats_dminv_at_large_kappa_and_paper_sgd_barely_moves() -> None:
    """Table 2 setting (K=4, L=10, c0 = ||A||_F^2, kappa = 1000), reduced to 30x30 matrices."""
    base = {
        "data": "usv_uniform",
        "kappa": 1000.0,
        "rows": 30,
        "cols": 30,
        "K": 4,
        "L": 10,
        "c0_rule": "fro",
        "iters": 300,
        "n_train": None,
        "n_test": 100,
        "lr_halve_every": 100,
    }
    adam = run(**base, optimizer="adam", lr=1e-3).summary
    sgd = run(**base).summary
    assert adam["log10_gain_vs_dminv"] > 0.3
    assert abs(sgd["log10_gain_vs_dminv"]) < 0.05 and sgd["max_abs_c_dev"] < 1e-2


def test_warmup_gradient_is_negative_at_zero() -> None:
    """Lemma 2: at C = 0 the gradient of every warm-up coefficient is negative."""
    s = run(
        model="warmup",
        data="usv_uniform",
        kappa=2.0,
        rows=10,
        cols=10,
        K=3,
        L=3,
        k_warm=1,
        n_train=1,
        batch=1,
        n_test=1,
        iters=1,
        lr=1e-3,
    ).summary
    assert s["grad_init_max"] < 0


def test_divergence_is_a_result_and_report_stops() -> None:
    out = TASK.run(validate_params(TASK, TASK.diverging_example), RunContext())
    assert out.status == "diverged" and out.diverged_step is not None and out.summary["diverged"]
    stopped = run(
        RunContext(reporter=lambda step, m: step < 10),
        rows=8,
        cols=8,
        K=2,
        iters=100,
        n_train=20,
        batch=10,
        n_test=4,
        log_every=5,
    )
    assert stopped.status == "pruned" and stopped.curve["step"][-1] == 10


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_matrix_path_matches_cpu() -> None:
    base = {
        "path": "matrix",
        "rows": 24,
        "cols": 36,
        "K": 3,
        "L": 4,
        "iters": 3,
        "n_train": 20,
        "batch": 10,
        "n_test": 8,
        "optimizer": "adam",
        "lr": 1e-2,
    }
    cpu = run(**base).summary
    gpu = run(RunContext(device="cuda"), **base).summary
    assert math.isclose(cpu["test_loss"], gpu["test_loss"], rel_tol=1e-8)
    f32 = run(RunContext(device="cuda"), **base, dtype="float32").summary
    assert math.isclose(cpu["test_loss"], f32["test_loss"], rel_tol=1e-2)


def test_pool_cache_returns_the_same_stream() -> None:
    spec = DataSpec("gauss", 7, 5, None, "std", None)
    first = Source(spec, 11, "train")
    a1, b1 = first.singular_values(6), first.singular_values(3)
    again = Source(spec, 11, "train")  # cache hit on the first draw
    a2, b2 = again.singular_values(6), again.singular_values(3)
    assert torch.equal(a1, a2) and torch.equal(b1, b2)
    assert not torch.equal(a1[:3], b1)
