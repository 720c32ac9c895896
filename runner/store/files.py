"""Durable Parquet writes: every part is written with page checksums and fsynced before any rename or
marker names it; its footer is read back checked against its name (runner.store.part_names)."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.fs.files import fsync_path, is_local
from runner.store.part_names import FooterError, footer_length


def _writer(sink: str | pa.NativeFile, schema: pa.Schema, fs: pafs.FileSystem | None = None) -> pq.ParquetWriter:
    """Page checksums, so flipped bytes are detected on read. Dictionary encoding only for string
    columns (ids, names, statuses: few distinct values): on the float columns of curves it is tried and
    abandoned, which was two thirds of encoding a curve part."""
    strings = [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    return pq.ParquetWriter(sink, schema, filesystem=fs, write_page_checksum=True, use_dictionary=strings)


def encode_parquet(table: pa.Table) -> pa.Buffer:
    """`table` as the bytes of one Parquet file (in memory: its name is made from its footer)."""
    sink = pa.BufferOutputStream()
    with _writer(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def write_durably(fs: pafs.FileSystem, path: str, data: pa.Buffer) -> None:
    """Write `data` to `path` and, locally, fsync it before returning."""
    with fs.open_output_stream(path) as out:
        out.write(data)
    if is_local(fs):
        fsync_path(path)


def read_tail(fs: pafs.FileSystem, path: str, size: int | None = None) -> bytes:
    """A part's footer with its length and magic (runner.store.part_names.tail_of), in one or two reads."""
    with fs.open_input_file(path) as handle:
        size = handle.size() if size is None else size
        guess = min(size, 64 * 1024)  # most footers are a few KB: one read gets them whole
        end = handle.read_at(guess, size - guess)
        length = footer_length(end[-8:])
        if length <= 0 or length + 12 > size:
            raise FooterError(f"the footer length {length} does not fit a file of {size} bytes")
        if length + 8 <= len(end):
            return bytes(end[-(length + 8) :])
        return bytes(handle.read_at(length + 8, size - length - 8))


def write_parquet_tables(fs: pafs.FileSystem, schema: pa.Schema, tables: Iterable[pa.Table], path: str) -> None:
    """Write `tables` (each of `schema`, each at least one row group) as one Parquet file, durably, with
    page checksums; only one of them need be in memory at a time (a merge streams its parts through).
    Locally the file is written by pyarrow's own file (a Python file object takes the GIL for each
    write, which stalls the thread that builds the next tables) and fsynced through a second
    descriptor (Linux syncs the file's data whichever descriptor asks)."""
    with _writer(path, schema, fs) as writer:
        for table in tables:
            writer.write_table(table)
    if is_local(fs):
        fsync_path(path)
