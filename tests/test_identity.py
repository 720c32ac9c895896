"""Run identity: stable ids, defaults omitted, a param added with a default keeps old ids."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from runner.grid.identity import canonical_params, run_id, validate_params
from tasks import TaskParams, get_task


class _V1(TaskParams):
    lr: float = 0.1
    n_iters: int = 10


class _V2(_V1):
    momentum: float = Field(0.0, description="added later, with a default that reproduces v1")


def _task(params: Any) -> Any:
    class T:
        name: ClassVar[str] = "toy"
        version: ClassVar[str] = "1"
        Params: ClassVar[Any] = params

    return T()


def test_adding_a_param_with_a_default_keeps_ids() -> None:
    old, new = _task(_V1), _task(_V2)
    for raw in ({}, {"lr": 0.5}, {"lr": 0.5, "n_iters": 3, "seed": 7}):
        assert run_id(old, validate_params(old, raw)) == run_id(new, validate_params(new, raw))
    assert run_id(new, validate_params(new, {"momentum": 0.9})) != run_id(new, validate_params(new, {}))


def test_version_is_part_of_the_id() -> None:
    a = _task(_V1)
    b = _task(_V1)
    type(b).version = "2"
    assert run_id(a, validate_params(a, {})) != run_id(b, validate_params(b, {}))


def test_canonical_params_drop_defaults_keep_union_tag() -> None:
    task = get_task("least_squares")
    p = validate_params(task, {"lr_rule": "optimal", "d_in": 20, "m": 50})
    assert canonical_params(task, p) == {"lr_rule": "optimal", "m": 50}
    q = validate_params(task, {"lr": 1})  # int written for a float: same cell as 1.0
    assert run_id(task, q) == run_id(task, validate_params(task, {"lr": 1.0}))
    assert run_id(task, q) != run_id(task, validate_params(task, {"lr": 1.0, "lr_rule": "const", "seed": 1}))
