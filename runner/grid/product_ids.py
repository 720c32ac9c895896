"""Run ids of a product block from its axes: each distinct axis value validated once, not each cell.

A block's cell is its fixed params with one value from each axis (a zip group is one axis whose values
set several keys; `repeat` is an axis over the seed). Where a task's params model checks every field on
its own, a field of a cell has the value it has in any other cell given the same raw value for it. So
validating the block's first cell (the origin) and, for each axis, every other value of that axis with
the others at the origin gives the canonical JSON of every field of every cell: the sum of the axes'
lengths in validations instead of their product. A cell's run id is then the hash of its fields'
canonical pieces joined in key order, exactly the text `identity.run_id` hashes.

"Checks every field on its own" is decided conservatively from pydantic's own description of the model
(`branch_keys`): no validator or serializer function anywhere (model, field, or inside a field's
type, since any of them may read other fields), no computed field, no default factory that reads the
other fields, no custom __init__ or post-init, no aliases, and a union branch chosen by a tag the block
does not vary. Any other model, and any block whose probe cells are not all valid, takes the per-cell
path, which also reports the first invalid cell exactly as before.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

import numpy as np
from pydantic import BaseModel

from runner.grid.identity import (
    ID_BYTES,
    canonical_json,
    canonical_params,
    discriminators,
    id_payload,
    params_adapter,
    validate_params,
    variants,
)
from tasks.base import TaskIdentity

Axis = Sequence[dict[str, Any]]  # one axis of a block: the partial params of each of its values
CHUNK = 65_536  # ids gathered into arrays this many at a time (a million bytes objects cost ~70 MB)


def _schemas(node: Any) -> Iterator[dict[str, Any]]:
    """Every schema dict in a pydantic core schema (metadata, which holds JSON-schema hooks, skipped)."""
    if isinstance(node, dict):
        if isinstance(node.get("type"), str):
            yield node
        for key, value in node.items():
            if key != "metadata":
                yield from _schemas(value)
    elif isinstance(node, list | tuple):
        for value in node:
            yield from _schemas(value)


def _schema_is_per_field(schema: dict[str, Any]) -> bool:
    kind = schema["type"]
    if kind.startswith("function-"):  # a validator or serializer: it may read other fields (info.data)
        return False
    if kind in ("model", "dataclass") and (schema.get("post_init") or schema.get("custom_init")):
        return False
    if kind == "default" and schema.get("default_factory_takes_data"):
        return False
    if kind in ("model-fields", "dataclass-args") and schema.get("computed_fields"):
        return False
    return not (kind == "model-field" and (schema.get("validation_alias") or schema.get("serialization_alias")))


def _model_is_per_field(model: type[BaseModel]) -> bool:
    decorators = model.__pydantic_decorators__
    declared = (
        decorators.validators,
        decorators.field_validators,
        decorators.root_validators,
        decorators.field_serializers,
        decorators.model_serializers,
        decorators.model_validators,
        decorators.computed_fields,
    )
    if any(declared) or any(f.alias is not None for f in model.model_fields.values()):
        return False
    if model.model_dump is not BaseModel.model_dump:  # an own dump may mix fields into the canonical form
        return False
    return all(_schema_is_per_field(s) for s in _schemas(model.__pydantic_core_schema__))


def _union_tag(discriminator: Any) -> str | None:
    """The one key a union's discriminator reads: a field name, or the tag of tasks.base.tagged_union's
    `pick` (which reads only that key of the raw params); None for any other callable."""
    if isinstance(discriminator, str):
        return discriminator
    if getattr(discriminator, "__module__", None) == "tasks.base" and (
        getattr(discriminator, "__qualname__", None) == "tagged_union.<locals>.pick"
    ):
        tag = inspect.getclosurevars(discriminator).nonlocals.get("tag")
        return tag if isinstance(tag, str) else None
    return None


@cache
def branch_keys(task: TaskIdentity) -> frozenset[str] | None:
    """The keys that choose a task's params model (its union tag; none for a single model) when every
    field of every model is checked on its own, else None (the task's cells are validated one by one)."""
    schema = params_adapter(task).core_schema
    if not all(_schema_is_per_field(s) for s in _schemas(schema)):  # the union's members included
        return None
    if schema["type"] == "definitions":
        schema = schema["schema"]
    keys: frozenset[str] = frozenset()
    if schema["type"] == "tagged-union":
        tag = _union_tag(schema["discriminator"])
        if tag is None:
            return None
        keys = frozenset({tag}) | discriminators(task)
    elif schema["type"] not in ("model", "definition-ref"):  # a validator around the union, a smart union
        return None
    return keys if all(_model_is_per_field(m) for m in variants(task)) else None


def _piece(name: str, canonical: dict[str, Any]) -> str:
    """A field's piece of the canonical params text, comma first ("" where the id omits the field)."""
    return f",{canonical_json(name)}:{canonical_json(canonical[name])}" if name in canonical else ""


def _probe(task: TaskIdentity, raw: dict[str, Any]) -> tuple[type[BaseModel], dict[str, Any]] | None:
    """(model, canonical params) of one cell, or None if it is invalid (the per-cell path says why)."""
    try:
        params = validate_params(task, raw)
    except (TypeError, ValueError):  # pydantic's ValidationError and ParamValueError are ValueErrors
        return None
    return type(params), canonical_params(task, params)


def product_ids(task: TaskIdentity, base: dict[str, Any], axes: list[Axis]) -> np.ndarray | None:
    """`product_id_chunks` as one array."""
    chunks = product_id_chunks(task, base, axes)
    return None if chunks is None else np.concatenate([np.empty(0, dtype="S32"), *chunks])


def product_id_chunks(task: TaskIdentity, base: dict[str, Any], axes: list[Axis]) -> Iterator[np.ndarray] | None:
    """The run ids (S32) of every cell of `base` times `axes` (last axis fastest), CHUNK at a time, or
    None where the fast path does not apply: a model whose fields are not checked on their own, a
    varied union tag, a key the model does not have, or an invalid cell among the probes (all decided
    before the first chunk)."""
    tags = branch_keys(task)
    varied: set[str] = set().union(*(part for axis in axes for part in axis))
    if tags is None or not all(axes) or tags & varied:
        return None
    origin = dict(base)
    for axis in axes:
        origin.update(axis[0])
    probed = _probe(task, origin)
    if probed is None:
        return None
    model, at_origin = probed
    if not (varied | set(base)) <= set(model.model_fields):
        return None
    # Groups of fields, each with its fields' pieces (in key order) per value: first the fields no axis
    # sets (one value: the origin's), then one group per axis, its values probed with the others at the origin.
    owner = {key: g for g, axis in enumerate(axes, start=1) for part in axis for key in part}
    names = [sorted(set(model.model_fields) - set(owner))]
    names += [sorted(key for key, o in owner.items() if o == g) for g in range(1, len(axes) + 1)]
    groups = [[tuple(_piece(name, at_origin) for name in names[0])]]
    for mine, axis in zip(names[1:], axes, strict=True):
        values = []
        for j, part in enumerate(axis):
            canonical = at_origin
            if j:
                other = _probe(task, {**origin, **part})
                if other is None or other[0] is not model:
                    return None
                canonical = other[1]
            values.append(tuple(_piece(name, canonical) for name in mine))
        groups.append(values)
    text = canonical_json(id_payload(task, {}))
    empty = f"{canonical_json('params')}:{{}}"
    cut = text.index(empty) + len(empty) - 1
    slots = [(g, i) for _, g, i in sorted((name, g, i) for g, mine in enumerate(names) for i, name in enumerate(mine))]
    return _chunks(_digests(text[:cut], text[cut:], slots, groups))


def _chunks(digests: Iterator[bytes]) -> Iterator[np.ndarray]:
    while chunk := b"".join(itertools.islice(digests, CHUNK)):
        yield np.frombuffer(chunk.hex().encode(), dtype="S32")  # first 16 bytes, as hex: the id


def _digests(
    head: str, tail: str, slots: list[tuple[int, int]], groups: list[list[tuple[str, ...]]]
) -> Iterator[bytes]:
    """Each cell's id bytes. The params text is its fields' pieces in key order (`slots`: group, index
    in the group). Per combination of the outer groups, the innermost (fastest) group's pieces are the
    holes of a format template, in the group's own order (both in key order), so a cell costs one
    format and one hash."""
    *outer, inner = groups
    last = len(groups) - 1
    start = len(head)
    for combo in itertools.product(*outer):
        runs: list[list[str]] = [[]]  # the fixed text before, between and after the holes
        for g, i in slots:
            if g == last:
                runs.append([])
            else:
                runs[-1].append(combo[g][i])
        template = "{}".join("".join(run).replace("{", "{{").replace("}", "}}") for run in runs)
        for value in inner:
            text = head + template.format(*value) + tail
            if text[start : start + 1] == ",":  # the first piece's comma
                text = text[:start] + text[start + 1 :]
            yield hashlib.sha256(text.encode()).digest()[:ID_BYTES]
