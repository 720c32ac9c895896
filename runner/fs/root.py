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


class Root:
    """A filesystem and a base path: where relative store paths live."""

    def __init__(self, fs: pafs.FileSystem, base: str) -> None:
        self.fs, self.base = fs, base.rstrip("/")
        # asked right before every commit point: raises where this writer may have lost its lock (an
        # object store's lease lock, runner.coord.lease_lock); an flock cannot be lost, so by default nothing
        self.fence: Callable[[], None] = _no_fence

    def abs(self, rel: str) -> str:
        return f"{self.base}/{rel}" if rel else self.base

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
