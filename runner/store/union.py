"""Every column of every learner for plain Parquet clients reading a whole folder.

pandas (`pd.read_parquet("R/runs")`) and pyarrow.dataset take a folder's schema from its first file and
silently drop the columns only other files have; DuckDB (without `union_by_name`) does the same. Each
task's parts keep their own columns (so `pd.read_parquet("R/runs/task=deep_linear")` gives that task's
columns alone), and a folder holding two or more tasks gets one more, empty, part whose schema is the
union of all their columns: `runs/task=_schema/part-*.parquet`, which sorts before every task's folder
(pyarrow discovers files in path order), so the whole folder reads with every column, null where a
task has none. DuckDB then refuses files that lack a column ("schema mismatch ... try union_by_name"),
and polars its own way: loud, never a dropped column. A column two tasks type differently
(hierarchical's `k`, a list; linear_resnet's `k`, an integer) has the first task's type there: reading
the other task's files through the folder fails on that column, loudly.

The part is rewritten (one transaction with the flush that widens the union) only when a task or a
column the union lacks arrives; `_schema` is no task, and the store's own listings leave it out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa

from runner.store.layout import SCHEMA_TASK, task_dir, without_partition
from runner.store.store import ResultStore
from runner.store.txn import Transaction


def union_of(schemas: Iterable[pa.Schema]) -> pa.Schema:
    """Every column of `schemas`, in the order met, with the first type met."""
    fields: dict[str, pa.Field] = {}
    for schema in schemas:
        for field in without_partition(schema):
            fields.setdefault(field.name, pa.field(field.name, field.type))
    return pa.schema(list(fields.values()))


def covers(union: pa.Schema | None, schema: pa.Schema) -> bool:
    """Whether `union` already has every column of `schema` (types aside: a conflict stays as it is)."""
    return union is not None and set(without_partition(schema).names) <= set(union.names)


def stage_union(store: ResultStore, txn: Transaction, kind: str, writing: Mapping[str, pa.Schema]) -> None:
    """Within `txn`, bring `kind`'s union part up to the tasks there and those `writing` (task -> the
    schema written now): written when two or more tasks share the folder and the union grew."""
    tasks = sorted(set(store.tasks_in(kind)) | set(writing))
    if len(tasks) < 2:
        return
    folder = task_dir(kind, SCHEMA_TASK)
    parts = store.reader.readable(store.parts(folder))
    current = store.reader.unified_schema(parts) if parts else None
    if all(covers(current, schema) for schema in writing.values()) and current is not None:
        return  # the common case: nothing new
    schemas = []
    for task in tasks:
        own = store.reader.readable(store.parts(task_dir(kind, task)))
        if own:
            schemas.append(store.reader.unified_schema(own))
        if task in writing:
            schemas.append(writing[task])
    union = union_of(schemas)
    if current is not None and union.equals(without_partition(current)):
        return
    final = txn.add(union.empty_table(), folder)
    store.reader.known(final, union)
    for part in parts:
        txn.remove(part)
