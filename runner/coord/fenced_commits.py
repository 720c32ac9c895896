"""Fenced commits on an object store: the commit point of a transaction is a put-if-absent of the next
numbered commit record, so a writer whose lease lapsed cannot commit over another (issue 44).

    _store/commits/c<n>.json    commit n: the transaction's marker (runner.store.txn), created exclusively

The writers' lock of an S3 root is a lease (runner.coord.lease_lock): a holder paused past it (SIGSTOP,
a suspended machine) resumes believing it holds the lock. Its half-lease check before the commit point
narrows that window but cannot close it: the pause may fall right after the check. So each holder
learns, when it takes the lock, the number of the newest commit record (`begin`); its commits then
create records n+1, n+2, ... with the root's create-if-absent (runner.fs.exclusive: S3's
If-None-Match). Two writers that believe they hold the lock have learned the same newest number, or
the later one a larger: of their records for one number exactly one is created, and the other writer's
transaction is not committed (CommitConflict, before anything of it is visible). A holder paused long
enough for records to be pruned behind it could create a pruned number: right after creating a record
it asks for the first record after its own (one listing of one key), and withdraws its record if any
exists.

After the record, the transaction's marker goes to _store/txn/ as before (readers look there, and
only there); a writer killed between the two leaves a record whose marker never came: the next holder
(`recover_unsealed`) writes the marker from the record, unless the record's staged parts are gone
(then it was applied, and its marker deleted, long ago).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from runner.coord.lease_lock import LockLost
from runner.fs.exclusive import S3IfNoneMatch
from runner.fs.files import delete_quietly, read_bytes
from runner.fs.root import Root

COMMITS_DIR = "_store/commits"
RECORD = re.compile(r"^c(\d{12})\.json$")
# Records kept behind the newest: a listing of the folder stays one request.
KEEP_RECORDS = 64
PRUNE_EVERY = 16


class CommitConflict(LockLost):
    """Another writer created the commit record this one was to create: this transaction is not committed."""


class CommitLog:
    """The numbered commit records of one object-store root; one per writers' lock."""

    def __init__(self, files: Root, exclusive: S3IfNoneMatch) -> None:
        self.files, self.exclusive = files, exclusive
        self.next: int | None = None  # the number this holder's next commit creates; None: lock not taken
        self._unchecked: int | None = None  # the newest record when the lock was taken, until recovery read it
        self._mine: int | None = None  # the last record this process created and wrote the marker of

    def _rel(self, number: int) -> str:
        return f"{COMMITS_DIR}/c{number:012d}.json"

    def numbers(self) -> list[int]:
        found = []
        for info in self.files.listing(COMMITS_DIR):
            match = RECORD.match(info.base_name)
            if match is not None:
                found.append(int(match[1]))
        return sorted(found)

    def begin(self) -> None:
        """Called once the writers' lock is taken: the number after the newest record."""
        newest = max(self.numbers(), default=0)
        # a record this process followed with its marker needs no look (one driver's flushes, back to back)
        self.next, self._unchecked = newest + 1, (newest or None) if newest != self._mine else None

    def end(self) -> None:
        self.next = None

    def seal(self, marker: bytes, then: Callable[[], None]) -> None:
        """The commit point: create this holder's next record, holding `marker`, then call `then` (which
        writes the marker where readers look). CommitConflict where another writer created it (or any
        later one) first; nothing is committed then."""
        if self.next is None:
            raise LockLost("the writers' lock is not held: no commit number")
        number = self.next
        rel = self._rel(number)
        if not self.exclusive.create(self.files.abs(rel), marker):
            raise CommitConflict(
                f"another writer committed transaction {number} of {self.files.base} first: this writer's lease "
                "had lapsed (it was paused or starved); this transaction is not committed"
            )
        after = self.exclusive.first_after(self.files.abs(COMMITS_DIR) + "/", self.files.abs(rel))
        if after is not None:  # a number pruned long ago, recreated by a writer paused that long
            delete_quietly(self.files.fs, self.files.abs(rel))
            raise CommitConflict(
                f"commit record {number} of {self.files.base} is behind {after.rsplit('/', 1)[-1]}: this writer was "
                "paused past its lease while others committed; this transaction is not committed"
            )
        self.next = number + 1
        then()
        self._mine = number
        if number % PRUNE_EVERY == 0:
            for old in self.numbers():
                if old <= number - KEEP_RECORDS:
                    delete_quietly(self.files.fs, self.files.abs(self._rel(old)))

    def newest(self) -> bytes | None:
        """The marker of the newest record when the lock was taken, once per taking (recovery asks; None:
        asked already, or no record). Records this holder creates are followed by their markers at once."""
        number, self._unchecked = self._unchecked, None
        if number is None:
            return None
        try:
            return read_bytes(self.files.fs, self.files.abs(self._rel(number)))
        except FileNotFoundError:
            return None


def fenced(files: Root, exclusive: S3IfNoneMatch) -> tuple[CommitLog, Callable[[], None], Callable[[], None]]:
    """A commit log for `files`, armed on it (`Root.seal`, `Root.unsealed`), with the callbacks its
    writers' lock calls once taken and once given back."""
    log = CommitLog(files, exclusive)
    files.seal = log.seal
    files.unsealed = log.newest
    return log, log.begin, log.end
