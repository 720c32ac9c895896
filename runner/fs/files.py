"""Durable small writes and the directory fsyncs that make renames and deletes survive a crash.
Locally every write is fsynced; on an object store a put or delete is durable once acknowledged."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.fs as pafs


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


def fsync_path(path: str) -> None:
    """fsync a local file by its path (Linux syncs the file's data whichever descriptor asks)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(fs: pafs.FileSystem, path: str) -> None:
    """Make a rename or delete in `path` durable (POSIX needs the directory itself synced)."""
    if not is_local(fs):
        return  # an object store's put/delete is durable once acknowledged
    try:
        fsync_path(path)
    except FileNotFoundError:
        return


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


def replace_bytes(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Overwrite `path` so that a reader sees the old content or the new, whole: locally a rename over
    it, on an object store a plain upload (it appears whole)."""
    if not is_local(fs):
        write_bytes(fs, path, data)
        return
    tmp = f"{path}.tmp"
    write_bytes(fs, tmp, data)
    os.replace(tmp, path)


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
