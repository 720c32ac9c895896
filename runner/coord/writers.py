"""Which writers' lock a root has: an flock locally, a lease queue on S3 (whose transactions check,
before their commit point, that the lease is still theirs: `Root.fence`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from runner.coord.flock import WriterLock
from runner.coord.lease_lock import LeaseLock
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
    if is_local(files.fs) or not isinstance(exclusive, S3IfNoneMatch):
        return WriterLock(files.fs, files.abs(LOCK_FILE))
    lock = LeaseLock(files, exclusive, settings().lock_lease_s)
    files.fence = lock.check
    return lock
