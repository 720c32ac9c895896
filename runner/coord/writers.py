"""Which writers' lock a root has: an flock locally, a lease queue on S3 (whose transactions check,
before their commit point, that the lease is still theirs: `Root.fence`, and whose commit itself is
fenced: runner.coord.fenced_commits), and on a filesystem without create-if-absent (gs://, a
filesystem object) a sole writer's record that refuses a second writer (runner.coord.sole_writer)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from runner.coord.fenced_commits import fenced
from runner.coord.flock import WriterLock
from runner.coord.lease_lock import LeaseLock
from runner.coord.sole_writer import SoleWriterLock
from runner.fs.exclusive import S3IfNoneMatch, for_root
from runner.fs.files import is_local
from runner.fs.root import Root
from runner.settings import settings

LOCK_FILE = "_store/lock"


class WritersLock(Protocol):
    """One writer at a time on a root; re-entrant within a process."""

    def held(self) -> AbstractContextManager[None]: ...


def writers_lock(uri: str, files: Root) -> WritersLock:
    """The writers' lock of the root `uri` (whose files are `files`); arms `files.fence` where the lock
    can be lost (a lease)."""
    exclusive = for_root(uri, files.fs)
    if is_local(files.fs):
        return WriterLock(files.fs, files.abs(LOCK_FILE))
    if not isinstance(exclusive, S3IfNoneMatch):
        sole = SoleWriterLock(files, settings().lock_lease_s)
        files.fence = sole.check
        return sole
    _, begin, end = fenced(files, exclusive)  # the commit itself fenced (runner.coord.fenced_commits)
    lock = LeaseLock(files, exclusive, settings().lock_lease_s, on_acquire=begin, on_release=end)
    files.fence = lock.check
    return lock
