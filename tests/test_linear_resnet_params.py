"""The linear_resnet params schema: defaults, resolved variant defaults, rejections of params a
variant does not use, and the column-type rules the store relies on."""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import TypeAdapter, ValidationError

from tasks.linear_resnet.params import GDParams, SGDParams
from tasks.linear_resnet.task import LinearResNetTask

ADAPTER = TypeAdapter(LinearResNetTask.Params)


def v(**raw: Any) -> Any:
    return ADAPTER.validate_python(raw)


def test_minimal_config_is_gd_on_the_paper_s_data() -> None:
    p = v()
    assert isinstance(p, GDParams)
    assert (p.d, p.k, p.n, p.noise, p.target, p.kappa) == (10, 10, 1000, 0.1, "neg_identity", None)
    assert (p.model, p.transform, p.step_rule, p.form, p.dtype) == (
        "resnet",
        "gaussian",
        "normalized",
        "gram",
        "float64",
    )
    assert p.c == 0.5 and p.eta is None and p.alpha is None and p.w_var is None
    assert p.a_var == pytest.approx(1 / 40) and p.b_var == pytest.approx(1 / 10)
    assert isinstance(v(algo="sgd"), SGDParams)


def test_resolved_defaults_give_one_model_per_run() -> None:
    """{} and {c: 0.5, a_var: 1/m, ...} are the same config, hence the same stored params."""
    assert v() == v(c=0.5, a_var=1 / 40, b_var=0.1)
    assert v(model="standard", m=50).w_var == pytest.approx(1 / 50)
    assert v(transform="modified_identity").alpha == 1.0
    given = v(eta=1e-5)
    assert given.step_rule == "given" and given.c is None
    assert v(eta="1e-5").eta == 1e-5  # YAML's 1e-5 arrives as a string
    for p in (v(), v(algo="sgd", batch_size=50, model="standard"), v(transform="identity", step_rule="theory")):
        assert ADAPTER.validate_python(p.model_dump(mode="json")) == p


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"batch_size": 10}, "extra"),  # GD takes no batch size
        ({"algo": "sgd", "batch_size": 2000}, "batch_size"),  # B <= n
        ({"algo": "sgd", "batch_size": 30, "sampling": "reshuffle"}, "divide"),
        ({"alpha": 2.0}, "alpha"),  # gaussian transform
        ({"transform": "identity", "a_var": 1.0}, "a_var"),
        ({"w_var": 0.1}, "w_var"),  # resnet is zero-initialised
        ({"init_seed": 3}, "init_seed"),
        ({"eta": 1e-5, "c": 0.5}, "c is only"),
        ({"step_rule": "normalized", "eta": 1e-5}, "eta"),
        ({"step_rule": "given"}, "needs eta"),
        ({"step_rule": "theory", "c": 0.3}, "c is only"),
        ({"m": 8}, "max(d, k)"),
        ({"transform": "modified_identity", "m": 15}, "d + k"),
        ({"d": 5}, "d == k"),
        ({"algo": "adam"}, "tag"),
        ({"transform": "orthogonal"}, "transform"),
        ({"c": -1.0}, "greater"),
        ({"kappa": 0.5}, "greater"),
    ],
)
def test_rejections(raw: dict, needle: str) -> None:
    with pytest.raises(ValidationError) as exc:
        ADAPTER.validate_python(raw)
    assert needle in str(exc.value)


def _scalar_ok(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return len(inner) == 1 and _scalar_ok(inner[0])
    if origin is Literal:
        return len({type(a) for a in get_args(annotation)}) == 1
    if origin is list:  # list[X] and typing.List[X] both have the origin list
        return get_args(annotation)[0] in (int, float)
    return annotation in (int, float, bool, str)


def _column_type(annotation: Any) -> Any:
    """The store's column type: Optional and Literal collapse to their scalar type."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return _column_type(next(a for a in get_args(annotation) if a is not type(None)))
    if origin is Literal:
        return type(get_args(annotation)[0])
    return annotation


def test_schema_follows_the_store_s_rules() -> None:
    types_by_name: dict[str, Any] = {}
    for model in (GDParams, SGDParams):
        assert model.model_config.get("extra") == "forbid" and model.model_config.get("frozen")
        for name, field in model.model_fields.items():
            assert _scalar_ok(field.annotation), name
            assert name == "seed" or field.description, name
            col = _column_type(field.annotation)
            assert types_by_name.setdefault(name, col) == col, name
    assert set(SGDParams.model_fields) - set(GDParams.model_fields) == {"batch_size", "sampling", "batch_seed"}
