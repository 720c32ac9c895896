"""A results root: a pyarrow filesystem and a base path under which every store and coordination path
is relative."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow.fs as pafs

from runner.errors import ConfigError


def open_root(root: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and base path for a local path or a URI (s3://, gs://, file://)."""
    text = str(root)
    if "://" in text:
        return pafs.FileSystem.from_uri(text)
    return pafs.LocalFileSystem(), str(Path(text).resolve())


def _no_fence() -> None:
    return None


def _no_seal(_marker: bytes, then: Callable[[], None]) -> None:
    then()


def _none_unsealed() -> bytes | None:
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


class SymlinkInRoot(ConfigError):
    """A symbolic link inside the root's own folders. Every path convgrid writes there is a plain file or
    folder it made, so a link was planted (or made by hand): following it would list, delete, move or
    overwrite what lies elsewhere (issue 44). Refused, naming the link and where it points (exit 2)."""

    def __init__(self, link: str) -> None:
        try:
            target = os.readlink(link)
        except OSError:
            target = "?"
        self.link = link
        super().__init__(
            f"is a symbolic link (to {target}) inside the results root's own folders: convgrid never follows a "
            "link there (it would read, delete or overwrite what lies elsewhere); remove the link and run again",
            file=link,
        )


def is_symlink(path: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


class Root:
    """A filesystem and a base path: where relative store paths live."""

    def __init__(self, fs: pafs.FileSystem, base: str) -> None:
        self.fs, self.base = fs, base.rstrip("/")
        # asked right before every commit point: raises where this writer may have lost its lock (an
        # object store's lease lock, runner.coord.lease_lock); an flock cannot be lost, so by default nothing
        self.fence: Callable[[], None] = _no_fence
        # on an object store, the commit point's fenced write of a marker, and the newest such marker (for
        # recovery) (runner.coord.fenced_commits); locally the flock fences: nothing
        self.seal: Callable[[bytes, Callable[[], None]], None] = _no_seal
        self.unsealed: Callable[[], bytes | None] = _none_unsealed

    def abs(self, rel: str) -> str:
        """The absolute path of `rel`, which must lie inside the root (`check_relative`)."""
        return f"{self.base}/{check_relative(rel)}" if rel else self.base

    def safe(self, rel: str) -> str:
        """`abs(rel)` once no folder on the way from the base to it, nor `rel` itself, is a symbolic link
        (each lstat'ed, never followed): SymlinkInRoot otherwise. A path not there yet is checked as far as
        it exists. An object store has no links: nothing to check."""
        path = self.abs(rel)
        if rel:
            self.safe_all([rel])
        return path

    def safe_all(self, rels: Iterable[str]) -> None:
        """`safe` for each of `rels`, each folder on the way lstat'ed once however many paths share it
        (a flush publishing a thousand staged parts names a few folders)."""
        if not isinstance(self.fs, pafs.LocalFileSystem):
            return
        seen: set[str] = set()
        for rel in rels:
            self.abs(rel)  # check_relative
            here = self.base
            for name in rel.split("/"):
                here = f"{here}/{name}"
                if here in seen:
                    continue
                try:
                    mode = os.lstat(here).st_mode
                except FileNotFoundError:
                    break
                if stat.S_ISLNK(mode):
                    raise SymlinkInRoot(here)
                if stat.S_ISDIR(mode):
                    seen.add(here)

    def rel(self, path: str) -> str:
        return path[len(self.base) + 1 :] if path.startswith(self.base + "/") else path

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.abs(rel)).type != pafs.FileType.NotFound

    def listing(self, rel: str) -> list[pafs.FileInfo]:
        """What `rel` holds; SymlinkInRoot where `rel`, a folder above it or an entry in it is a symbolic
        link (pyarrow's listing follows links, and its callers delete and move what it lists)."""
        path = self.safe(rel)
        if not self.exists(rel):
            return []
        try:
            found = list(self.fs.get_file_info(pafs.FileSelector(path)))
        except FileNotFoundError:
            return []
        links = self.links_in(rel)
        if links:
            raise SymlinkInRoot(f"{path}/{links[0]}")
        return found

    def links_in(self, rel: str) -> list[str]:
        """The names of the symbolic links directly in local folder `rel` (scandir's entry type: no
        extra system call per entry); none on an object store."""
        if not isinstance(self.fs, pafs.LocalFileSystem):
            return []
        try:
            with os.scandir(self.abs(rel)) as entries:
                return sorted(e.name for e in entries if e.is_symlink())
        except (FileNotFoundError, NotADirectoryError):
            return []
