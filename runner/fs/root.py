"""A results root: a pyarrow filesystem and a base path under which every store and coordination path
is relative."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pyarrow.fs as pafs


def open_root(root: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and base path for a local path or a URI (s3://, gs://, file://)."""
    text = str(root)
    if "://" in text:
        return pafs.FileSystem.from_uri(text)
    return pafs.LocalFileSystem(), str(Path(text).resolve())


def _no_fence() -> None:
    return None


class UnsafePath(ValueError):
    """A path read from the store's own files (a marker, a claim) that is not a plain relative path
    inside the root: absolute, with `..`, empty or control characters."""


def check_relative(rel: str) -> str:
    """`rel` if it is a plain relative path inside the root, else UnsafePath. Lexical: every path the
    store writes is made of its own folder names and generated file names, so anything else was written
    by someone else (a planted marker must not delete or overwrite a file outside the root)."""
    if not isinstance(rel, str) or not rel:
        raise UnsafePath(f"not a path: {rel!r}")
    if rel.startswith(("/", "\\")) or "\\" in rel or ":" in rel.split("/", 1)[0]:
        raise UnsafePath(f"not a relative path: {rel[:200]!r}")
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts) or any(ord(c) < 32 for c in rel):
        raise UnsafePath(f"not a plain path inside the root: {rel[:200]!r}")
    return rel


class Root:
    """A filesystem and a base path: where relative store paths live."""

    def __init__(self, fs: pafs.FileSystem, base: str) -> None:
        self.fs, self.base = fs, base.rstrip("/")
        # asked right before every commit point: raises where this writer may have lost its lock (an
        # object store's lease lock, runner.coord.lease_lock); an flock cannot be lost, so by default nothing
        self.fence: Callable[[], None] = _no_fence

    def abs(self, rel: str) -> str:
        """The absolute path of `rel`, which must lie inside the root (`check_relative`)."""
        return f"{self.base}/{check_relative(rel)}" if rel else self.base

    def rel(self, path: str) -> str:
        return path[len(self.base) + 1 :] if path.startswith(self.base + "/") else path

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.abs(rel)).type != pafs.FileType.NotFound

    def listing(self, rel: str) -> list[pafs.FileInfo]:
        if not self.exists(rel):
            return []
        try:
            return list(self.fs.get_file_info(pafs.FileSelector(self.abs(rel))))
        except FileNotFoundError:
            return []
