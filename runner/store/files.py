"""Durable Parquet writes: every part is written with page checksums and fsynced before any rename or
marker names it."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.fs.files import fsync_path, is_local


def write_parquet(fs: pafs.FileSystem, table: pa.Table, path: str) -> None:
    """Write one Parquet file durably, with page checksums so flipped bytes are detected on read
    (the options: `write_parquet_tables`)."""
    write_parquet_tables(fs, table.schema, [table], path)


def write_parquet_tables(fs: pafs.FileSystem, schema: pa.Schema, tables: Iterable[pa.Table], path: str) -> None:
    """Write `tables` (each of `schema`, each at least one row group) as one Parquet file, durably, with
    page checksums; only one of them need be in memory at a time (a merge streams its parts through).

    Dictionary encoding only for string columns (ids, names, statuses: few distinct values): on the
    float columns of curves it is tried and abandoned, which was two thirds of encoding a curve part.
    Locally the file is written by pyarrow's own file (a Python file object takes the GIL for each
    write, which stalls the thread that builds the next tables) and fsynced through a second
    descriptor (Linux syncs the file's data whichever descriptor asks)."""
    strings = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    with pq.ParquetWriter(path, schema, filesystem=fs, write_page_checksum=True, use_dictionary=strings) as writer:
        for table in tables:
            writer.write_table(table)
    if is_local(fs):
        fsync_path(path)
