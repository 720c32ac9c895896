"""Arrow table rules of the store: one schema for a folder's rows, the newest row of each run, the
curve rows of kept attempts."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def micros(column: pa.ChunkedArray | pa.Array) -> list[int | None]:
    """Timestamps as integer microseconds since the epoch, for comparing in Python: a Python datetime
    costs about 5 µs to make, which was a tenth of a flush's time in the index of runs parts."""
    return list(pc.cast(pc.cast(column, pa.timestamp("us", "UTC")), pa.int64()).to_pylist())


def kept_curves(table: pa.Table, keys: pa.Table) -> pa.Table:
    """The rows of `table` whose (run_id, batch_id) is in `keys`, in the order read: each run's rows
    lie in one part, written in step order, so they come grouped by run in step order (sorting 10
    million rows would cost more than the whole read). In a settled store that is every row read;
    rows of superseded attempts appear only in stores written before the current layout."""
    if table.num_rows == 0:
        return table
    position = pc.index_in(table["run_id"], value_set=keys["run_id"])
    expected = pc.take(keys["batch_id"], position)
    keep = pc.fill_null(pc.equal(expected, table["batch_id"]), False)
    return table if pc.all(keep).as_py() else table.filter(keep)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly `schema`'s columns, in its order and types (absent ones as nulls)."""
    if table.schema.equals(schema, check_metadata=True):
        return table
    columns = [
        table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def latest_per_run(table: pa.Table) -> pa.Table:
    """Keep the newest row (by `finished`) of each run_id; duplicates come from retries or two drivers."""
    if table.num_rows == 0:
        return table
    table = table.sort_by([("run_id", "ascending"), ("finished", "descending")])
    ids = table["run_id"]
    keep = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))
    first = pa.concat_arrays([pa.array([True]), keep.combine_chunks()])
    return table.filter(first)
