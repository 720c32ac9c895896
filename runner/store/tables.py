"""Arrow table rules of the store: one schema for a folder's rows, the newest row of each run, the
curve rows of kept attempts, a legacy curve column under its current name."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc


def kept_curves(table: pa.Table, keys: pa.Table) -> pa.Table:
    """The rows of `table` of the runs in `keys` (run_id, batch_id) that belong to their kept attempt,
    in the order read: each run's rows lie in one part, written in step order, so they come grouped by
    run in step order (sorting 10 million rows would cost more than the whole read). A row without a
    batch_id is a kept attempt's (curves/ holds nothing else now); rows with one come from stores written
    before, where curves/ could also hold superseded attempts' rows: those must match."""
    if table.num_rows == 0:
        return table
    position = pc.index_in(table["run_id"], value_set=keys["run_id"])
    if "batch_id" in table.column_names:
        expected = pc.take(keys["batch_id"], position)
        keep = pc.fill_null(pc.or_kleene(pc.is_null(table["batch_id"]), pc.equal(expected, table["batch_id"])), False)
        keep = pc.and_(keep, pc.is_valid(position))
    else:
        keep = pc.is_valid(position)
    return table if pc.all(keep).as_py() else table.filter(keep)


def with_attempt(rows: pa.Table, attempts: pa.Table) -> pa.Table:
    """Curve rows with their attempt's batch_id (from `attempts`: run_id, batch_id), where they lack it:
    the history's curves (attempt_curves/) join attempts/ on both."""
    position = pc.index_in(rows["run_id"], value_set=attempts["run_id"])
    batch = pc.take(attempts["batch_id"], position)
    if "batch_id" in rows.column_names:
        batch = pc.coalesce(rows["batch_id"], batch)
        return rows.set_column(rows.schema.get_field_index("batch_id"), "batch_id", batch)
    return rows.add_column(1, "batch_id", batch)


def last_per_run(table: pa.Table) -> pa.Table:
    """Keep the last row of each run_id, in the table's order (a flush's records in arrival order)."""
    if table.num_rows == 0:
        return table
    position = pa.array(range(table.num_rows), pa.int64())
    ordered = table.append_column("__position", position).sort_by(
        [("run_id", "ascending"), ("__position", "descending")]
    )
    ids = ordered["run_id"]
    keep = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))
    first = pa.concat_arrays([pa.array([True]), keep.combine_chunks()])
    return ordered.filter(first).drop_columns(["__position"]).sort_by([("run_id", "ascending")])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly `schema`'s columns, in its order and types (absent ones as nulls)."""
    if table.schema.equals(schema, check_metadata=True):
        return table
    columns = [
        table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def order_keys(table: pa.Table, direction: str) -> list[tuple[str, str, str]]:
    """The sort keys that put a task's attempts in commit order (`ascending`: oldest first): the store's
    commit sequence, then, for rows from before it, `finished`; a null is the oldest."""
    nulls = "at_start" if direction == "ascending" else "at_end"
    return [(c, direction, nulls) for c in ("commit_seq", "finished") if c in table.column_names]


def latest_per_run(table: pa.Table) -> pa.Table:
    """Keep the newest row of each run_id, in commit order (`order_keys`); duplicates in runs/ come from
    stores written before the current layout, or from rows read across a transaction's parts."""
    if table.num_rows == 0:
        return table
    table = table.sort_by([("run_id", "ascending", "at_end"), *order_keys(table, "descending")])
    ids = table["run_id"]
    keep = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))
    first = pa.concat_arrays([pa.array([True]), keep.combine_chunks()])
    return table.filter(first)


def current_names(table: pa.Table, renames: Mapping[str, str]) -> pa.Table:
    """`table` with each legacy column of `renames` (old name -> current, runner.store.columns
    `legacy_curve_columns`) under its current name. Where the table has both (parts of both kinds read
    as one), a row holds one of them: the current column's value where set, else the legacy one's."""
    for old, new in renames.items():
        if old not in table.column_names:
            continue
        legacy = table[old]
        if new not in table.column_names:
            table = table.rename_columns([new if c == old else c for c in table.column_names])
            continue
        current = table[new]
        merged = legacy if pa.types.is_null(current.type) else pc.coalesce(current, legacy.cast(current.type))
        table = table.set_column(table.schema.get_field_index(new), new, merged).drop_columns([old])
    return table
