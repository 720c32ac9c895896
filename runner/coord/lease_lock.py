"""The writers' lock of an object-store root (S3), where there is no flock: a queue of leases on the
root's create-if-absent (runner.fs.exclusive), renewed by heartbeats as the claims' are
(runner.coord.claims).

    _store/wlock/g<n>.json    generation n: a writer (host, pid, id) holding or waiting; created exclusively
    _store/wlock/g<n>.beat    its heartbeat: a counter it rewrites every lease/6, waiting or holding
    _store/wlock/g<n>.free    generation n released

A writer queues by creating g<newest+1> (of several racing for one number, one wins; the others look
again). It holds the lock once every older generation is free, dead or gone: dead when this writer has
seen its beat unchanged for a lease on its own monotonic clock (no two machines' clocks are compared),
or at once when it ran in this process table (runner.coord.liveness: boot id and pid namespace, not
the host name) and its pid is gone (a `kill -9`ed command does not make the next
one wait). Queueing makes the lock fair: a driver committing flushes back to back cannot starve a
`compact` (a waiter that only polled for a free moment hardly ever saw one).

A holder deletes the generations more than KEEP_GENERATIONS older than its own, so the folder holds a
bounded number of files, not one per commit. A writer paused between its listing and its create may
recreate a number used and deleted long ago: that takes KEEP_GENERATIONS newer ones, so right after
creating it a writer that sees a generation that far ahead (or a newer one already free: it could only
have been taken while this number did not exist) withdraws its own and queues again. Waiters that
queued right behind it are no reason to withdraw: they wait for it.

A lease cannot stop a holder paused past it (SIGSTOP, a suspended machine) from resuming as if it
still held the lock. `check` narrows that window: before its commit point a transaction asks that this
process's last successful beat be younger than half a lease (an observer waits a full one), so a
holder that slept through its lease refuses to commit. The window left (a pause right after the check)
is closed by the commit itself: a put-if-absent of the next numbered commit record, the number learnt
when the lock was taken (runner.coord.fenced_commits). See docs/store.md.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from runner.coord.liveness import Clock, DriverInfo, Heartbeat, Liveness, identity
from runner.fs.exclusive import ExclusiveCreate
from runner.fs.files import delete_quietly, read_bytes, write_bytes
from runner.fs.root import Root

LOCK_DIR = "_store/wlock"
LOCK_LEASE_S = 30.0
# Generations kept behind the holder's: a writer whose look was stale recreates a used number only
# after this many newer ones were made, which it then sees (see the module's docstring).
KEEP_GENERATIONS = 64
GENERATION = re.compile(r"^g(\d+)\.(json|beat|free)$")


class LockLost(RuntimeError):
    """This process's lease may have passed to another writer: it must not commit."""


class LeaseLock:
    """One writer at a time per object-store root. Re-entrant within a process, like WriterLock."""

    def __init__(
        self,
        files: Root,
        exclusive: ExclusiveCreate,
        lease_s: float = LOCK_LEASE_S,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        on_acquire: Callable[[], None] | None = None,
        on_release: Callable[[], None] | None = None,
    ) -> None:
        # `clock` times what this writer observes of the others and `sleep` waits for its turn (tests
        # pass fake ones); its own heartbeat keeps the real monotonic clock. `on_acquire` / `on_release`:
        # told once the lock is taken / given back (the fenced commits' numbering, runner.coord.fenced_commits).
        self.files, self.exclusive, self.lease_s, self.clock, self.sleep = files, exclusive, lease_s, clock, sleep
        self.on_acquire, self.on_release = on_acquire, on_release
        self.keep = KEEP_GENERATIONS
        self.owner = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.liveness = Liveness()
        self._thread_lock = threading.RLock()
        self._depth = 0
        self._gen: int | None = None
        self._beat = 0
        # a missed beat is one of six per lease; `check` refuses to commit after three
        self.heartbeat = Heartbeat(self._write_beat, lease_s / 6, "convgrid-wlock")

    @property
    def poll_s(self) -> float:
        """How often a waiter looks whether its turn came: each handover waits about half of it, and
        a driver's commits and a compact hand the lock over at each commit."""
        return min(0.05, self.lease_s / 8)

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._thread_lock:
            if self._depth == 0:
                self._acquire()
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self._release()

    def check(self) -> None:
        """Raise LockLost unless this process holds the lock with a beat younger than half a lease: an
        observer takes over only after a full lease of one unchanged beat, so half a lease leaves the
        commit that follows this check time to land."""
        if self._gen is None:
            raise LockLost("the writers' lock is not held")
        age = self.heartbeat.age()
        if age >= self.lease_s / 2:
            raise LockLost(
                f"the writers' lock of {self.files.base} was last renewed {age:.1f} s ago (lease {self.lease_s:g} s): "
                "another writer may have taken it over; this transaction is not committed"
            )

    # ---- taking and giving back --------------------------------------------------------------------
    def _path(self, gen: int, kind: str) -> str:
        return self.files.abs(f"{LOCK_DIR}/g{gen:09d}.{kind}")

    def _generations(self) -> dict[int, set[str]]:
        found: dict[int, set[str]] = {}
        for info in self.files.listing(LOCK_DIR):
            match = GENERATION.match(info.base_name)
            if match is not None:
                found.setdefault(int(match[1]), set()).add(match[2])
        return found

    def _holder(self, gen: int, kinds: set[str]) -> DriverInfo | None:
        """Generation `gen`'s holder as the liveness rule sees it (its beat from g<n>.beat, 0 before the
        first), or None where it is already gone (deleted by a newer holder between list and read)."""
        try:
            body = json.loads(read_bytes(self.files.fs, self._path(gen, "json")))
            beat = int(read_bytes(self.files.fs, self._path(gen, "beat"))) if "beat" in kinds else 0
        except (FileNotFoundError, ValueError):
            return None
        except OSError:
            # an object store may report a key deleted while it is read as another failure: gone is gone
            if self.files.exists(f"{LOCK_DIR}/g{gen:09d}.json"):
                raise
            return None
        try:
            return DriverInfo.of(body, f"g{gen}", beat)
        except (TypeError, KeyError, ValueError):
            return None  # not a generation this code wrote: nobody holds it

    def _acquire(self) -> None:
        body = json.dumps(
            {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(), "at": time.time(), **identity()}
        )
        while True:
            gens = self._generations()
            mine = max((g for g, kinds in gens.items() if "json" in kinds), default=-1) + 1
            started = time.monotonic()
            if not self.exclusive.create(self._path(mine, "json"), body.encode()):
                continue  # another writer queued first: look again at once
            self._gen, self._beat = mine, 0
            self.heartbeat.start(last_success=started)
            if self._wait_turn(mine):
                if self.on_acquire is not None:
                    try:
                        self.on_acquire()
                    except BaseException:
                        self._release()
                        raise
                return
            self._withdraw()

    def _wait_turn(self, mine: int) -> bool:
        """Wait until every older generation is free, dead or gone; then hold the lock. False: this
        generation must be withdrawn (the look that named it was stale, or this process was paused so
        long that others may count it dead)."""
        gens = self._generations()
        if any(g >= mine + self.keep or (g > mine and "free" in kinds) for g, kinds in gens.items()):
            return False
        while True:
            if "json" not in gens.get(mine, set()):
                return False
            older = {g: kinds for g, kinds in gens.items() if g < mine}
            busy = [
                g for g, kinds in older.items() if "json" in kinds and "free" not in kinds and self._alive(g, kinds)
            ]
            if not busy:
                try:
                    self.check()
                except LockLost:
                    return False  # paused past half a lease: another writer may count this one dead
                for old, kinds in older.items():
                    if old < mine - self.keep:
                        # the generation file first: what a crash here leaves (a beat, a free marker) is ignored
                        for kind in sorted(kinds, key=lambda k: k != "json"):
                            delete_quietly(self.files.fs, self._path(old, kind))
                return True
            self.sleep(self.poll_s)
            gens = self._generations()

    def _alive(self, gen: int, kinds: set[str]) -> bool:
        holder = self._holder(gen, kinds)
        return holder is not None and self.liveness.alive(holder, self.lease_s, self.clock())

    def _withdraw(self) -> None:
        self._stop_beating()
        gen, self._gen = self._gen, None
        if gen is not None:
            delete_quietly(self.files.fs, self._path(gen, "json"))
            delete_quietly(self.files.fs, self._path(gen, "beat"))

    def _stop_beating(self) -> None:
        self.heartbeat.stop()

    def _write_beat(self) -> None:
        write_bytes(self.files.fs, self._path(self._gen or 0, "beat"), str(self._beat + 1).encode())
        self._beat += 1

    def _release(self) -> None:
        if self.on_release is not None:
            self.on_release()
        self._stop_beating()
        gen, self._gen = self._gen, None
        if gen is not None:
            try:
                write_bytes(self.files.fs, self._path(gen, "free"), b"")
            except OSError as exc:
                # what was done under the lock is committed: failing now would make a caller redo it.
                # The beats have stopped, so the next writer takes the lock a lease later.
                warnings.warn(
                    f"the writers' lock of {self.files.base} is released only a lease from now: {exc}", stacklevel=3
                )
