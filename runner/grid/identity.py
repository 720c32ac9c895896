"""Run identity: validated params -> canonical JSON -> run_id.

run_id = sha256(canonical JSON of {task, version, params that differ from their defaults}).
Canonical JSON comes from the validated pydantic model (numbers as numbers, sorted keys), never from
raw YAML, so `1e-5` and `0.00001` are one cell. Omitting defaults means a param added later with a
default keeps every old id; changing a default or a meaning needs a version bump of the task.
"""

from __future__ import annotations

import hashlib
import json
import math
import types
import typing
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, TypeAdapter

from tasks.base import TaskIdentity


@cache
def params_adapter(task: TaskIdentity) -> TypeAdapter[Any]:
    return TypeAdapter(task.Params)


def variants(task: TaskIdentity) -> list[type[BaseModel]]:
    """The concrete parameter models of a task: one, or one per branch of a discriminated union."""
    params = task.Params
    if isinstance(params, type) and issubclass(params, BaseModel):
        return [params]
    if get_origin(params) is typing.Annotated:
        params = get_args(params)[0]
    if get_origin(params) in (Union, types.UnionType):
        # Branches may be Annotated[Model, Tag(...)] (callable discriminators); unwrap them.
        branches = [get_args(a)[0] if get_origin(a) is typing.Annotated else a for a in get_args(params)]
        return [a for a in branches if isinstance(a, type) and issubclass(a, BaseModel)]
    raise TypeError(f"{task.name}: Params must be a pydantic model or a union of models, not {params!r}")


@cache
def discriminators(task: TaskIdentity) -> frozenset[str]:
    """Fields whose type is a single Literal in every variant (the union's tag): always part of the id."""
    models = variants(task)
    if len(models) < 2:
        return frozenset()
    tags: set[str] | None = None
    for model in models:
        mine = {
            n
            for n, f in model.model_fields.items()
            if get_origin(f.annotation) is Literal and len(get_args(f.annotation)) == 1
        }
        tags = mine if tags is None else tags & mine
    return frozenset(tags or ())


def tag_value(model: type[BaseModel], tag: str) -> str:
    """The Literal value of a union branch's tag field."""
    return str(get_args(model.model_fields[tag].annotation)[0])


_REQUIRED = object()  # marks a field without a default: always part of the id


@cache
def _default_json(model: type[BaseModel]) -> dict[str, Any]:
    """Each field's default as JSON (what model_dump(mode="json") would give it), once per model:
    building a TypeAdapter per field per cell made identity the cost of a million-cell grid."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            out[name] = _REQUIRED
            continue
        annotation: Any = field.annotation
        out[name] = TypeAdapter(annotation).dump_python(field.get_default(call_default_factory=True), mode="json")
    return out


@cache
def id_names(model: type[BaseModel]) -> dict[str, str]:
    """field -> its name in run ids: a param renamed after runs were stored gives its old name as its
    `serialization_alias` (tasks.base.renamed), so the ids of those runs, and of any cell asking for them
    again, do not change; every other field is hashed under its own name."""
    return {n: f.serialization_alias or n for n, f in model.model_fields.items()}


def canonical_params(task: TaskIdentity, params: BaseModel) -> dict[str, Any]:
    """Params that differ from their defaults (plus the union tag), as JSON-ready values, under their
    names in run ids (`id_names`)."""
    full = params.model_dump(mode="json")
    keep = discriminators(task)
    named = id_names(type(params))
    out: dict[str, Any] = {}
    for name, default_json in _default_json(type(params)).items():
        value = full[name]
        if name in keep or default_json is _REQUIRED or value != default_json or type(value) is not type(default_json):
            out[named[name]] = value
    return out


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def id_payload(task: TaskIdentity, canonical: dict[str, Any]) -> dict[str, Any]:
    """What a run id hashes: canonical params (from canonical_params) with the task's name and version."""
    return {"task": task.name, "version": task.version, "params": canonical}


ID_BYTES = 16  # a run id is the first 16 bytes of the sha256, as 32 hexadecimal digits


def hash_id(text: str) -> str:
    """The run id of a payload's canonical JSON text."""
    return hashlib.sha256(text.encode()).digest()[:ID_BYTES].hex()


def run_id(task: TaskIdentity, params: BaseModel) -> str:
    return hash_id(canonical_json(id_payload(task, canonical_params(task, params))))


def lineage_key(task: TaskIdentity, canonical: dict[str, Any], budget: str) -> str:
    """The identity of a run without its budget param `budget`: what runs that differ only in their
    budget share (runner.execute.checkpointing grows one from another's final state). `canonical`: the
    run's canonical params (`canonical_params`)."""
    rest = {k: v for k, v in canonical.items() if k != budget}
    return hash_id(canonical_json({**id_payload(task, rest), "budget": budget}))


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class ParamValueError(ValueError):
    """A value pydantic accepts but a run cannot: it would change meaning (a bool read as 1), not fit
    the store's 64-bit integer column, or not be a number JSON (hence a run id) can hold."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def _check_value(key: str, raw: Any, value: Any) -> None:
    if isinstance(raw, bool) and not isinstance(value, bool):
        raise ParamValueError(key, f"expected a number, got {raw!r} (a bool would silently become {int(raw)})")
    if isinstance(value, bool):
        return
    if isinstance(raw, str) and isinstance(value, int | float):  # pydantic's lax mode parses "20" as 20
        raise ParamValueError(
            key,
            f"expected {type(value).__name__}, got the string {raw!r} (write the number without quotes)",
        )
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise ParamValueError(key, f"{value} is outside the 64-bit integer range [{INT64_MIN}, {INT64_MAX}]")
    if isinstance(value, float) and not math.isfinite(value):
        raise ParamValueError(key, f"{value} is not a finite number")
    if isinstance(value, list | tuple):
        raws = raw if isinstance(raw, list | tuple) and len(raw) == len(value) else [None] * len(value)
        for r, v in zip(raws, value, strict=True):
            _check_value(key, r, v)


@cache
def _passing_defaults(model: type[BaseModel]) -> dict[str, Any]:
    """Field -> default value, for the defaults that pass _check_value: a field still holding that very
    object needs no check per cell (checking every field of every cell was a fifth of a grid's cost)."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            continue
        default = field.get_default(call_default_factory=True)
        try:
            _check_value(name, None, default)
        except ParamValueError:
            continue
        out[name] = default
    return out


_ABSENT = object()


@cache
def _old_names(model: type[BaseModel]) -> dict[str, str]:
    """Field -> the name it is stored under where that differs (a renamed param's serialization alias,
    still taken on input): the raw value to check may be under either."""
    return {name: f.serialization_alias for name, f in model.model_fields.items() if f.serialization_alias}


def validate_params(task: TaskIdentity, raw: dict[str, Any]) -> BaseModel:
    """Validate raw params: pydantic.ValidationError for a wrong type or bound, ParamValueError for a
    value that would change meaning or not survive the store and the run id (see _check_value)."""
    params: BaseModel = params_adapter(task).validate_python(raw)
    defaults = _passing_defaults(type(params))
    old = _old_names(type(params))
    for key, value in params.__dict__.items():
        name = old[key] if old and key not in raw and old.get(key) in raw else key  # the name the file gave
        given = raw.get(name, _ABSENT)
        if given is _ABSENT and value is defaults.get(key, _ABSENT):
            continue
        _check_value(name, None if given is _ABSENT else given, value)
    return params
