"""linear_resnet's checkpoints beyond its examples: SGD's minibatch order (the generator, and the epoch's
permutation and position under reshuffling) resumed and grown mid-epoch; a run stopped by its tolerance;
SGD at the theory's step, whose budget cannot grow because its step depends on it; and batches of GD and of
SGD whose members resume apart."""

from __future__ import annotations

from typing import Any

import pytest

from runner.grid.identity import validate_params
from tasks import get_task
from tests.checkpoint_checks import check_batched_resume, grows_exactly, resumes_exactly
from tests.test_checkpoint_conformance import run

SHAPE: dict[str, Any] = {"m": 12, "depth": 2, "n": 60, "n_iters": 30, "log_every": 4}
SGD: dict[str, Any] = {**SHAPE, "algo": "sgd", "batch_size": 10, "form": "gram"}


@pytest.mark.parametrize("sampling", ["reshuffle", "independent"])
def test_sgd_resumes_and_grows_mid_epoch(sampling: str) -> None:
    raw = {**SGD, "sampling": sampling}
    resumes_exactly("linear_resnet", raw, picks=4)
    grows_exactly("linear_resnet", raw, short=11)  # 6 batches an epoch: 11 is mid-epoch


def test_gd_stopped_by_its_tolerance_resumes() -> None:
    raw = {**SHAPE, "algo": "gd", "n_iters": 200, "stop_rel": 0.2, "log_every": 7}
    resumes_exactly("linear_resnet", raw)
    assert run("linear_resnet", raw).n_steps < 200


def test_sgd_at_the_theory_step_does_not_grow_because_its_step_depends_on_the_budget() -> None:
    task = get_task("linear_resnet")
    raw = {**SGD, "step_rule": "theory"}
    assert task.growable_budget(validate_params(task, raw)) is None
    short, long = run("linear_resnet", {**raw, "n_iters": 8}), run("linear_resnet", raw)
    assert short.curve["loss"][1] != long.curve["loss"][1], "the first steps differ with the budget"
    assert task.growable_budget(validate_params(task, {**SGD, "step_rule": "given", "eta": 1e-3})) == "n_iters"


@pytest.mark.parametrize("algo", ["gd", "sgd"])
def test_batch_members_resume_apart(algo: str) -> None:
    base = {**SGD, "sampling": "reshuffle"} if algo == "sgd" else {**SHAPE, "algo": "gd"}
    configs = [
        {**base, "seed": 0},
        {**base, "seed": 1, "c": 0.3, "log_every": 3},
        {**base, "seed": 2, "n_iters": 20},
        {**base, "seed": 3, "transform": "identity", "c": 0.8},
    ]
    check_batched_resume("linear_resnet", configs)
