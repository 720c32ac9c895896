"""Explicit Arrow schemas per task, built from its Params models and declared fields (the layer that
knows tasks builds them; the store below only writes what it is given and reads what files say).

The store never infers a schema from the first row: a metric or param that is null in the first runs
and set in later ones keeps its column and type.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin

import pyarrow as pa

from runner.grid.identity import variants
from runner.store.columns import CURVE_COLUMNS, PARTITION, RUN_COLUMNS, curve_column
from tasks.base import Task, TaskIdentity
from tasks.registry import builtin_task_names, get_task, learner_package

FIELD_TYPES: dict[str, pa.DataType] = {"float": pa.float64(), "int": pa.int64(), "bool": pa.bool_(), "str": pa.string()}


def arrow_type(annotation: Any) -> pa.DataType:
    """Arrow type of a param annotation: scalars, Literals, Optional[...] and list[...] of scalars."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"unsupported param union {annotation!r}")
        return arrow_type(inner[0])
    if origin is Literal:
        kinds = {type(a) for a in get_args(annotation)}
        return arrow_type(kinds.pop()) if len(kinds) == 1 else pa.string()
    if origin is list:  # list[X] and typing.List[X] both have the origin list
        return pa.list_(arrow_type(get_args(annotation)[0]))
    scalar = {bool: pa.bool_(), int: pa.int64(), float: pa.float64(), str: pa.string()}
    if annotation in scalar:
        return scalar[annotation]
    raise TypeError(f"unsupported param type {annotation!r}")


@cache
def param_columns(task: TaskIdentity) -> list[pa.Field]:
    """One column per param name across all variants of the task (same name, same type)."""
    cols: dict[str, pa.DataType] = {}
    for model in variants(task):
        for name, field in model.model_fields.items():
            typ = arrow_type(field.annotation)
            if cols.setdefault(name, typ) != typ:
                raise TypeError(f"{task.name}: param {name!r} has types {cols[name]} and {typ} in different variants")
    return [pa.field(n, t) for n, t in cols.items()]


@cache
def runs_schema(task: Task) -> pa.Schema:
    fixed = {f.name for f in RUN_COLUMNS}
    params = param_columns(task)
    summary = [pa.field(n, FIELD_TYPES[t]) for n, t in task.summary_fields.items()]
    names = [f.name for f in params] + [f.name for f in summary]
    clash = (set(names) & fixed) | {n for n in names if names.count(n) > 1}
    if clash:
        raise TypeError(f"{task.name}: params/summary fields clash with store columns: {sorted(clash)}")
    return pa.schema(RUN_COLUMNS + params + summary, metadata={"task": task.name, "version": task.version})


@cache
def curve_columns(task: Task) -> dict[str, str]:
    """Each curve field of the task -> its curves/ column: `<name>_t` where the task's runs have a column
    of that name (runner.store.columns.curve_column), so that curves and runs share run_id alone."""
    runs = set(runs_schema(task).names)
    columns = {n: curve_column(n, runs) for n in task.curve_fields}
    names = [f.name for f in CURVE_COLUMNS] + list(columns.values())
    clash = {n for n in names if names.count(n) > 1} | (set(columns.values()) & (runs | {PARTITION}))
    if clash:
        raise TypeError(f"{task.name}: curve fields clash with store or runs columns: {sorted(clash)}")
    return columns


@cache
def curves_schema(task: Task) -> pa.Schema:
    extra = [pa.field(curve_columns(task)[n], FIELD_TYPES[t]) for n, t in task.curve_fields.items()]
    return pa.schema(CURVE_COLUMNS + extra, metadata={"task": task.name, "version": task.version})


def stored_curve(name: str, curve: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """A run's curve (`Result.curve` of registered task `name`) under the columns curves/ stores it in:
    what a worker puts in the run's record, so learners keep their own field names."""
    if not curve:
        return {}
    runs = set(task_schemas(name)[0].names)
    return {curve_column(k, runs): list(v) for k, v in curve.items()}


def task_schemas(name: str) -> tuple[pa.Schema, pa.Schema]:
    """(runs schema, curves schema) of a registered task: what writers hand the store. Read from the
    cache (runner.grid.cache) when this learner's code made them before, so that a driver whose runs
    execute elsewhere never imports the learner (nor torch); built from the task otherwise."""
    return _schemas(name, learner_package(name))


@cache
def _schemas(name: str, package: str) -> tuple[pa.Schema, pa.Schema]:
    from runner.grid import cache as schema_cache

    path = schema_cache.schemas_entry(package)
    cached = schema_cache.load_schemas(path)
    if cached is not None:
        return cached
    task = get_task(name)
    schemas = runs_schema(task), curves_schema(task)
    if name not in builtin_task_names():  # a learner registered from outside: checked against ours first
        clashes = name_clashes(
            {name: schemas[0], **{b: _schemas(b, learner_package(b))[0] for b in builtin_task_names()}}
        )
        if clashes:
            raise TypeError(f"learner {name!r} ({package}): " + "; ".join(clashes))
    schema_cache.store_schemas(path, schemas)
    return schemas


def name_clashes(runs: Mapping[str, pa.Schema]) -> list[str]:
    """What would break a read of every task's runs at once (`pd.read_parquet("R/runs")`, DuckDB's
    `read_parquet(..., union_by_name=true)`, polars, pyarrow.dataset): two learners' columns of one name
    with different types, or names that differ only in case (DuckDB's names are case-insensitive). One
    line per clash, naming the learners, columns and types; [] when there is none."""
    seen: dict[str, dict[tuple[str, str], list[str]]] = {}
    for task, schema in sorted(runs.items()):
        for f in schema:
            seen.setdefault(f.name.casefold(), {}).setdefault((f.name, str(f.type)), []).append(task)
    out = []
    for variants_of in seen.values():
        if len(variants_of) > 1:
            shown = ", ".join(f"{'/'.join(ts)}: {n} {t}" for (n, t), ts in sorted(variants_of.items()))
            out.append(f"columns of one name with different types or cases ({shown}); rename the param or field")
    return out
