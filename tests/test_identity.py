"""Run identity: stable ids, defaults omitted, a param added with a default keeps old ids; the ids of a
product block computed from its axes are exactly the per-cell ids."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

import numpy as np
import pytest
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

from runner.errors import ConfigError
from runner.grid import block_ids, blocks, identity
from runner.grid import product_ids as product_ids_module
from runner.grid.block_ids import per_cell_ids
from runner.grid.blocks import Block, check_block
from runner.grid.identity import canonical_params, run_id, validate_params
from runner.grid.model import GridSpec
from runner.grid.product_ids import branch_keys, product_ids
from runner.grid.spec import load_grid
from runner.grid.yaml_source import read_yaml
from tasks import TaskParams, get_spec, get_task, task_names
from tasks.base import tagged_union


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


# The fast path: a product block's ids from its axes (runner/grid/product_ids.py), against the per-cell path.


def _blocks(grid: dict[str, Any], file: str = "<grid>") -> list[Block]:
    return [check_block(b, file, i) for i, b in enumerate(GridSpec.model_validate(grid).blocks)]


def _fast_ids(block: Block) -> np.ndarray | None:
    return product_ids(block.task, block.spec.params, block.all_axes)


def test_fast_ids_are_the_per_cell_ids_on_every_tasks_grids() -> None:
    """Every block of every grid file, per task: either the fast path refuses the task (its params have
    cross-field checks) or it gives exactly the per-cell ids."""
    fast_tasks = set()
    for name in task_names():
        task = get_spec(name)
        fast = branch_keys(task) is not None
        files = sorted(Path("grids", name).rglob("*.yaml"))
        for file in files:
            for block in _blocks(read_yaml(file), str(file)):
                ids = _fast_ids(block)
                if not fast:
                    assert ids is None
                else:
                    assert ids is not None and ids.tolist() == per_cell_ids(block).tolist(), file
        if fast:
            fast_tasks.add(name)
            assert files or name == "faulty"
    # The learners whose params are checked field by field today (a validator added to one moves it to
    # the per-cell path: correct, but a large grid of it is then validated cell by cell again).
    assert fast_tasks == {"least_squares", "faulty"}


EDGE_GRID: dict[str, Any] = {
    "blocks": [
        {  # int for a float (lr: 1, lr: 2), a float for an int (n_iters: 6.0), defaults given (tol, cond,
            # dtype, d_out: 5): omitted from the id; a zip group; repeat over the seed from 5 on
            "task": "least_squares",
            "params": {"d_in": 3, "tol": 1e-10, "cond": None, "seed": 5},
            "product": {"lr": [1, 0.5, 2], "dtype": ["float32", "float64"], "d_out": [5, 1]},
            "zip": [{"m": [10, 20], "n_iters": [5, 6.0]}],
            "repeat": 3,
        },
        {"task": "least_squares", "params": {"lr_rule": "optimal", "seed": 2}, "product": {"d_out": [1, 5]}},
        {"task": "least_squares"},  # every param at its default: one cell, with an (almost) empty id
        {"task": "least_squares", "params": {"lr_rule": "const"}, "zip": {"cond": [None, 10.0], "lr": [0.1, 0.1]}},
        {  # nested values and non-ASCII text
            "task": "faulty",
            "params": {"ledger": "r\u00e9sum\u00e9/\u2603", "x": 3},
            "product": {"weights": [[1, 2.5], None, [0.5]], "sleep_s": [0, 0.0]},
        },
    ]
}


def test_fast_ids_edge_cases_equal_per_cell_ids_and_independent_ids() -> None:
    blocks = _blocks(EDGE_GRID)
    for block in blocks:
        ids = _fast_ids(block)
        assert ids is not None and ids.tolist() == per_cell_ids(block).tolist()
    task = get_spec("least_squares")
    first = _fast_ids(blocks[0])
    assert first is not None and len(first) == 3 * 2 * 2 * 2 * 3
    # The first cell, written by hand with the canonical values: lr 1 is 1.0, the defaults left out.
    by_hand = {"d_in": 3, "lr": 1.0, "dtype": "float32", "m": 10, "n_iters": 5, "seed": 5}
    assert first[0].decode() == run_id(task, validate_params(task, by_hand))
    assert canonical_params(task, validate_params(task, by_hand)) == {**by_hand, "lr_rule": "const"}
    last = {"d_in": 3, "lr": 2, "dtype": "float64", "d_out": 1, "m": 20, "n_iters": 6, "seed": 7}  # seed 5 + 2
    assert first[-1].decode() == run_id(task, validate_params(task, last))
    assert blocks[0].raw_at(len(first) - 1) == {**EDGE_GRID["blocks"][0]["params"], **last, "n_iters": 6.0}
    default = _fast_ids(blocks[2])
    assert default is not None and default[0].decode() == run_id(task, validate_params(task, {}))


class _Colour(enum.Enum):
    red = "red"
    blue = "blue"


class _Inner(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    a: int = 1
    b: list[float] = Field(default_factory=lambda: [0.0])


class _Rich(TaskParams):
    need: int  # required: always in the id
    colour: _Colour = _Colour.red
    inner: _Inner = _Inner()
    sizes: tuple[int, ...] = (1, 2)
    table: dict[str, float] = Field(default_factory=dict)
    rate: float = 0.5
    label: str = "n"


def test_fast_ids_of_a_model_with_enums_nested_models_and_a_required_field() -> None:
    task = _task(_Rich)
    assert branch_keys(task) == frozenset()
    grid = {
        "blocks": [
            {
                "task": "least_squares",  # replaced below: the block's task is the toy model
                "params": {"need": 3, "table": {"z": 1, "a": 2}, "label": "\u00fc\u20ac"},
                "product": {"colour": ["blue", "red"], "inner": [{"a": 2, "b": [1, 2]}, {}, {"b": [0]}]},
                "zip": {"sizes": [[3], [1, 2], []], "rate": [1, 0.5, 2.5]},
                "repeat": 2,
            }
        ]
    }
    (block,) = _blocks(grid)
    block = dataclasses.replace(block, task=task)
    ids = _fast_ids(block)
    assert ids is not None and ids.tolist() == per_cell_ids(block).tolist()
    assert len(set(ids.tolist())) == 36 - 12  # inner {} and {b: [0]} are one cell: b's default is [0.0]
    p = validate_params(task, {"need": 3, "colour": "blue", "inner": {"a": 2}, "sizes": [1, 2], "rate": 0.5})
    assert canonical_params(task, p) == {"need": 3, "colour": "blue", "inner": {"a": 2, "b": [0.0]}}  # as JSON
    assert canonical_params(task, validate_params(task, {"need": 3, "inner": {"b": [0]}})) == {"need": 3}


def _after(value: float) -> float:
    return value


class _FieldValidator(_V1):
    @field_validator("lr")
    @classmethod
    def _check(cls, value: float, info: ValidationInfo) -> float:
        return value * info.data.get("n_iters", 1)


class _ModelValidator(_V1):
    @model_validator(mode="after")
    def _check(self) -> _ModelValidator:
        return self


class _BeforeValidator(_V1):
    @model_validator(mode="before")
    @classmethod
    def _check(cls, data: Any) -> Any:
        return data


class _AnnotatedValidator(_V1):
    rate: Annotated[float, AfterValidator(_after)] = 1.0


class _InnerChecked(BaseModel):
    a: int = 1

    @model_validator(mode="after")
    def _check(self) -> _InnerChecked:
        return self


class _NestedValidator(_V1):
    inner: _InnerChecked = _InnerChecked()


class _Computed(_V1):
    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented use on a property
    @property
    def total(self) -> float:
        return self.lr * self.n_iters


class _Serializer(_V1):
    @field_serializer("lr")
    def _dump(self, value: float) -> float:
        return value


class _FactoryReadsData(_V1):
    steps: int = Field(default_factory=lambda data: data["n_iters"])


class _Aliased(_V1):
    rate: float = Field(1.0, alias="step")


class _PostInit(_V1):
    def model_post_init(self, context: Any) -> None:
        pass


class _OwnDump(_V1):
    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        return super().model_dump(**kwargs)


class _A(_V1):
    kind: Literal["a"] = "a"


class _B(_V1):
    kind: Literal["b"] = "b"


def _pick_kind(value: Any) -> Any:
    return value.get("kind", "a") if isinstance(value, dict) else getattr(value, "kind", "a")


@pytest.mark.parametrize(
    "params",
    [
        _FieldValidator,
        _ModelValidator,
        _BeforeValidator,
        _AnnotatedValidator,
        _NestedValidator,
        _Computed,
        _Serializer,
        _FactoryReadsData,
        _Aliased,
        _PostInit,
        _OwnDump,
        _A | _B,  # a smart union: the branch depends on every field
        Annotated[Annotated[_A, Tag("a")] | Annotated[_B, Tag("b")], Discriminator(_pick_kind)],  # may read any field
        Annotated[_A | _B, Field(discriminator="kind"), BeforeValidator(lambda v: v)],
    ],
    ids=lambda p: getattr(p, "__name__", None) or str(p)[:40],
)
def test_models_that_may_check_fields_together_take_the_per_cell_path(params: Any) -> None:
    task = _task(params)
    assert branch_keys(task) is None
    assert product_ids(task, {}, [[{"lr": 0.1}, {"lr": 0.2}]]) is None


def test_a_tagged_union_is_fast_unless_the_block_varies_its_tag() -> None:
    for params in (Annotated[_A | _B, Field(discriminator="kind")], tagged_union("kind", "a", _A, _B)):
        task = _task(params)
        assert branch_keys(task) == frozenset({"kind"})
        assert product_ids(task, {}, [[{"kind": "a"}, {"kind": "b"}]]) is None
        ids = product_ids(task, {"kind": "b"}, [[{"lr": 0.1}, {"lr": 1}], [{"seed": 0}, {"seed": 1}]])
        per_cell = [
            run_id(task, validate_params(task, {"kind": "b", "lr": lr, "seed": s})) for lr in (0.1, 1) for s in (0, 1)
        ]
        assert ids is not None and [i.decode() for i in ids] == per_cell


@pytest.mark.parametrize(
    ("block", "key"),
    [
        ({"product": {"lr": [0.1, 0.2, -1.0]}}, "lr"),  # the last axis value
        ({"product": {"lr": [0.1, 0.2], "n_iters": [1, True]}}, "n_iters"),  # a bool for an int
        ({"zip": {"d_in": [1, 2], "lr": [0.1, float("inf")]}}, "lr"),
        ({"params": {"lr_rule": "optimal"}, "product": {"lr": [0.1]}}, "lr"),  # not a param of the branch
        ({"product": {"lr_rule": ["const", "optimal"], "lr": [0.1, 0.2]}}, "lr"),  # a varied tag: per cell
        ({"product": {"d_in": [1, 2], "d_ni": [3]}}, "d_ni"),
        ({"params": {"m": 0}, "repeat": 3}, "m"),
        ({"params": {"seed": "abc"}, "repeat": 2}, "seed"),  # was a ValueError's traceback
        ({"params": {"seed": 1.5}, "repeat": 2}, "seed"),  # was silently seeds 1 and 2
    ],
)
def test_an_invalid_cell_is_refused_as_the_per_cell_path_refuses_it(
    block: dict[str, Any], key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVGRID_CACHE", "off")
    grid = {"blocks": [{"task": "least_squares", "params": {"m": 4}}, {"task": "least_squares", **block}]}
    with pytest.raises(ConfigError) as fast:
        load_grid(grid)
    monkeypatch.setattr(block_ids, "product_id_chunks", lambda *args: None)
    with pytest.raises(ConfigError) as slow:
        load_grid(grid)
    assert str(fast.value) == str(slow.value) and f"block 1: key '{key}'" in str(fast.value)


def test_a_product_block_validates_the_sum_of_its_axes_not_their_product(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVGRID_CACHE", "off")
    calls = []
    real = identity.validate_params

    def counted(task: Any, raw: dict[str, Any]) -> Any:
        calls.append(raw)
        return real(task, raw)

    monkeypatch.setattr(product_ids_module, "validate_params", counted)
    monkeypatch.setattr(blocks, "validate_params", counted)
    grid = load_grid({"blocks": [{"task": "least_squares", "product": {"lr": [0.1, 0.2, 0.3, 0.4]}, "repeat": 50}]})
    assert len(grid) == 200
    assert len(calls) == 1 + 3 + 49 + 2  # the origin, each other value of each axis, the two cross-checks
