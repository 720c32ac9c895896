"""Whether a folder's union part (runner.store.union) can be trusted by a plain Parquet client: it is
there wherever two or more tasks share the folder, and it has exactly the columns of every task's
parts with the types the union rule gives them (the first task's type, in task order).

pandas and pyarrow.dataset take a folder's schema from this part, whatever it says: without it a
folder read whole silently loses the columns only later tasks have, and with a wrong type (`lr`
float32) every value of the column is silently cast to it (0.03 read as 0.029999999329447746). So
`status` names a missing or wrong one, and `compact` (and a flush that writes to the folder) rebuilds
it. Only names and Arrow types are compared: a schema's metadata (pandas' own, a task's version) is
no column's type.
"""

from __future__ import annotations

import pyarrow as pa

from runner.store.layout import SCHEMA_TASK, TASK_KINDS, task_dir, without_partition
from runner.store.parts import PartReader
from runner.store.store import ResultStore
from runner.store.txn import Transaction
from runner.store.union import union_of


def expected_union(reader: PartReader, parts_of: dict[str, list[str]]) -> pa.Schema | None:
    """The union the tasks' readable parts call for (`parts_of`: task -> its parts in this folder), in
    task order; None where fewer than two tasks have a part (no union part is written then)."""
    schemas = []
    for task in sorted(parts_of):
        own = reader.readable(parts_of[task])
        if own:
            schemas.append(reader.unified_schema(own))
    return union_of(schemas) if len(schemas) >= 2 else None


def difference(found: pa.Schema | None, wanted: pa.Schema) -> str | None:
    """What is wrong with union part schema `found` against `wanted` (None: nothing): names and types."""
    if found is None:
        return "missing"
    have = {f.name: f.type for f in without_partition(found)}
    want = {f.name: f.type for f in wanted}
    lacking = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    typed = [f"{n} is {have[n]} where the tasks have {want[n]}" for n in want if n in have and have[n] != want[n]]
    problems = []
    if lacking:
        problems.append(f"lacks {', '.join(lacking[:8])}{' ...' if len(lacking) > 8 else ''}")
    if extra:
        problems.append(f"has columns no task has: {', '.join(extra[:8])}")
    problems.extend(typed[:8])
    return "; ".join(problems) or None


def union_problem(store: ResultStore, kind: str) -> str | None:
    """What is wrong with folder `kind`'s union part (None: right, or none is due)."""
    parts = {task: store.parts(task_dir(kind, task)) for task in store.tasks_in(kind)}
    wanted = expected_union(store.reader, parts)
    if wanted is None:
        return None
    readable = store.reader.readable(store.parts(task_dir(kind, SCHEMA_TASK)))
    if len(readable) > 1:
        return f"{len(readable)} union parts where there must be one"
    return difference(store.reader.schema(readable[0]) if readable else None, wanted)


def union_problems(store: ResultStore) -> dict[str, str]:
    """Folder (runs, curves, ...) -> what is wrong with its union part, where something is."""
    found = {kind: union_problem(store, kind) for kind in TASK_KINDS}
    return {kind: problem for kind, problem in found.items() if problem is not None}


def rebuild_union(store: ResultStore, txn: Transaction, kind: str) -> bool:
    """Within `txn`, replace folder `kind`'s union part by the one its tasks call for, if it is missing or
    wrong; whether it did. (Each task's folder as it is before `txn`: compaction keeps their columns.)"""
    if union_problem(store, kind) is None:
        return False
    parts = {task: store.parts(task_dir(kind, task)) for task in store.tasks_in(kind)}
    wanted = expected_union(store.reader, parts)
    assert wanted is not None  # a problem is only found where a union is due
    folder = task_dir(kind, SCHEMA_TASK)
    store.reader.known(txn.add(wanted.empty_table(), folder), wanted)
    for part in store.parts(folder):
        txn.remove(part)
    return True
