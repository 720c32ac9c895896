"""ldminv's checkpoints beyond its examples: fresh matrices every iteration (the train stream's generators
go in the checkpoint, past the cached first draw), SGD with the learning rate halving mid-run, D-SVD with
Adam and inner training, budget growth across a halving, and batches whose members resume apart."""

from __future__ import annotations

from typing import Any

import pytest

from tests.checkpoint_checks import check_batched_resume, grows_exactly, resumes_exactly

MINV: dict[str, Any] = {"algo": "minv", "rows": 8, "cols": 8, "K": 3, "L": 4, "iters": 12, "batch": 4, "n_test": 6}


@pytest.mark.parametrize(
    "extra",
    [
        {"n_train": None, "optimizer": "adam", "lr": 1e-3, "log_every": 5},
        {"n_train": 20, "optimizer": "sgd", "lr": 1e-2, "lr_halve_every": 4, "log_every": 3, "path": "matrix"},
    ],
    ids=["fresh-matrices-adam", "matrix-sgd-halving"],
)
def test_minv_resumes_and_grows(extra: dict[str, Any]) -> None:
    raw = {**MINV, **extra}
    resumes_exactly("ldminv", raw)
    grows_exactly("ldminv", raw, short=5)  # across a halving, and off the curve's cadence


def test_dsvd_with_adam_and_inner_training_resumes_and_grows() -> None:
    raw = {"algo": "dsvd", "m": 4, "n_hat": 6, "K_svd": 2, "K_inv": 2, "L_inv": 3, "iters": 5, "n_train": 8}
    raw |= {"batch": 4, "n_test": 3, "inner_iters": 1, "optimizer": "adam", "log_every": 2}
    resumes_exactly("ldminv", raw)
    grows_exactly("ldminv", raw, short=3)


def test_batch_members_resume_apart() -> None:
    base = {**MINV, "n_train": 20, "optimizer": "adam", "lr": 1e-3, "log_every": 4}
    configs = [
        {**base, "seed": 0},
        {**base, "seed": 1, "lr_halve_every": 3},
        {**base, "seed": 2, "iters": 7},
        {**base, "seed": 3, "coeff_init": "uniform"},
    ]
    check_batched_resume("ldminv", configs)


def test_dsvd_batch_members_resume_apart() -> None:
    base = {"algo": "dsvd", "m": 4, "n_hat": 6, "K_svd": 2, "K_inv": 2, "L_inv": 3, "iters": 4, "n_train": 8}
    base |= {"batch": 4, "n_test": 3, "inner_iters": 1, "log_every": 1}
    check_batched_resume("ldminv", [{**base, "seed": s, "lr": 1e-2 * (s + 1)} for s in range(3)])
