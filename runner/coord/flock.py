"""The writers' lock of a local root: an flock on `_store/lock`."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow.fs as pafs

from runner.fs.files import ensure_dir, is_local


class WriterLock:
    """One writer at a time per local root: an flock on `_store/lock`, released by the kernel when its
    holder dies (a SIGKILLed driver never leaves the store locked). Re-entrant within a process.

    S3 roots have a lease lock instead (runner.coord.lease_lock), other filesystems a sole writer's
    record (runner.coord.sole_writer)."""

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
