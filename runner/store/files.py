"""File-level primitives of the store: durable Parquet writes, directory fsyncs, the writers' lock and
the kill points the fault tests use. Nothing here knows what a run is.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

# The environment variable naming the phase at which the process kills itself (fault tests only):
# `CONVGRID_STORE_KILL_AT=published` SIGKILLs the first transaction that reaches that phase,
# `CONVGRID_STORE_KILL_AT=flush:published` the first of a driver's flushes (labels: flush, compact, append).
KILL_ENV = "CONVGRID_STORE_KILL_AT"


def kill_point(phase: str, label: str = "") -> None:
    """Die here, as a power cut or `kill -9` would, when the fault tests ask for this phase."""
    wanted = os.environ.get(KILL_ENV)
    if wanted is not None and wanted in (phase, f"{label}:{phase}"):
        os.kill(os.getpid(), signal.SIGKILL)


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


def fsync_dir(fs: pafs.FileSystem, path: str) -> None:
    """Make a rename or delete in `path` durable (POSIX needs the directory itself synced)."""
    if not is_local(fs):
        return  # an object store's put/delete is durable once acknowledged
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def write_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    if is_local(fs):
        with open(path, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    else:
        with fs.open_output_stream(path) as out:
            out.write(data)


def read_bytes(fs: pafs.FileSystem, path: str) -> bytes:
    with fs.open_input_stream(path) as stream:
        return bytes(stream.read())


def ensure_dir(fs: pafs.FileSystem, path: str) -> None:
    if is_local(fs):
        if os.path.isdir(path):
            return  # one stat: the common case, several times per flush
        os.makedirs(path, exist_ok=True)
        fsync_dir(fs, str(Path(path).parent))  # the new directory's entry must survive a crash too
    else:
        fs.create_dir(path, recursive=True)


def delete_quietly(fs: pafs.FileSystem, path: str) -> None:
    """Delete a file that may already be gone (recovery repeats deletions a dead process began)."""
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if "not found" not in str(exc).lower() and "no such" not in str(exc).lower():
            raise


class WriterLock:
    """One writer at a time per local root: an flock on `_store/lock`, released by the kernel when its
    holder dies (a SIGKILLed driver never leaves the store locked). Re-entrant within a process.

    S3 roots have a lease lock instead (runner.store.lease_lock); other object stores have none here:
    one writing command at a time is assumed there (docs/store.md)."""

    def __init__(self, fs: pafs.FileSystem, path: str) -> None:
        self.fs, self.path = fs, path
        self._depth = 0
        self._fd: int | None = None
        self._thread_lock = threading.RLock()

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._thread_lock:
            if self._depth == 0 and is_local(self.fs):
                import fcntl

                ensure_dir(self.fs, str(Path(self.path).parent))
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                self._fd = fd
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    os.close(self._fd)  # closing releases the flock
                    self._fd = None
