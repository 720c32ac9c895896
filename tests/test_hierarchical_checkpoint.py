"""hierarchical's checkpoints beyond its examples: the staged K/W learner resumed at every kind of epoch (inside
a stage, at a stage's end before its distillation and its after-layer summary, in the final phase) with one
optimiser kept for the whole run or a fresh one per phase; the final phase grown off the curve's cadence (the
shorter run's stage-end row is not the longer run's) for the K/W learner and the DenseNet; and the kernel fit,
whose one checkpoint is its result."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tasks.status import PREEMPTED
from tests.checkpoint_checks import grows_exactly, resumes_exactly
from tests.test_checkpoint_conformance import assert_same_result, collecting, run

SMALL: dict[str, Any] = {"d": 6, "n_mc": 2000, "n_train": 200, "n_val": 50, "n_test": 200, "L": 3, "k": [3, 2]}
WK: dict[str, Any] = {**SMALL, "learner": "wk", "m": 6, "batch": 50, "epochs_per_stage": 1, "final_epochs": 5}


@pytest.mark.parametrize(
    "extra",
    [{"opt_state": "keep", "log_every": 3}, {"optimizer": "sgd", "lr": 0.01, "final_lr": 0.005, "log_every": 4}],
    ids=["adam-kept", "sgd-momentum-reset"],
)
def test_staged_learner_resumes_anywhere_and_its_final_phase_grows(extra: dict[str, Any]) -> None:
    raw = {**WK, **extra}
    saved = resumes_exactly("hierarchical", raw, picks=2)
    alone = run("hierarchical", raw)
    for ckpt in saved[:5]:  # at the end of each stage 2D, 2N, 3D, 3N (one epoch each) and in the final phase
        assert_same_result(run("hierarchical", raw, resume=ckpt), alone, f"from {ckpt.step}")
    grows_exactly("hierarchical", raw, short=2)


def test_densenet_final_phase_grows_off_the_cadence() -> None:
    raw = {**SMALL, "learner": "densenet", "m": 6, "batch": 50, "epochs": 2, "final_epochs": 4, "log_every": 3}
    resumes_exactly("hierarchical", raw)
    grows_exactly("hierarchical", raw, short=1)  # the short run's row at epoch 3 is a stage end, not on cadence


def test_kernel_fit_is_saved_whole() -> None:
    raw = {**SMALL, "learner": "kernel", "kernel": "poly"}
    alone = run("hierarchical", raw)
    saved, save = collecting()
    preempt = threading.Event()
    preempt.set()
    assert run("hierarchical", raw, checkpointer=save, preempt=preempt).status == PREEMPTED
    assert [c.step for c in saved] == [1]
    assert_same_result(run("hierarchical", raw, resume=saved[0]), alone, "resumed")
