"""The writers' lock of a root on a filesystem with no create-if-absent here (gs:// through pyarrow, a
filesystem object handed to ResultStore): one writer at a time cannot be enforced there, so a second
one is refused, loudly, instead of the silent no-op lock it used to get (issue 44: two commands could
rewrite the same runs part and duplicate rows).

    _store/wlock/writer.json   the writer: owner, host, pid, process table, beat (rewritten every lease/6)

A process takes the root once, at its first write, and keeps it until it exits (a `run` flushes
often; each handover would be a window). Taking it: a record of another writer that still beats (seen
to change within a lease, on this process's own clock) refuses this one (SecondWriter, naming it); a
record of a process gone from this process table, or silent for a lease, is taken over (the wait is
said at once). Then this writer's record is written, and before every commit point (`check`) it is
read back: a writer that started at the same moment and overwrote it makes this one refuse to commit
(LockLost), and the other is refused at its next look. Without an atomic primitive two writers can
still both pass within one read-back; the object stores convgrid knows that have one (S3's
If-None-Match) use it (runner.coord.lease_lock).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from runner.coord.lease_lock import LockLost
from runner.coord.liveness import Clock, DriverInfo, Heartbeat, Liveness, identity
from runner.errors import Busy
from runner.fs.files import delete_quietly, ensure_dir, read_bytes, write_bytes
from runner.fs.root import Root

WRITER_FILE = "_store/wlock/writer.json"


class SecondWriter(Busy):
    """Another command writes this root, whose filesystem has no lock: this one changes nothing."""


class SoleWriterWait(UserWarning):
    """A writer waits for another's record to prove dead before it writes."""


class SoleWriterLock:
    def __init__(
        self,
        files: Root,
        lease_s: float,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.files, self.lease_s, self.clock, self.sleep = files, lease_s, clock, sleep
        self.owner = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._thread_lock = threading.RLock()
        self._taken = False
        self._beat = 0
        self.heartbeat = Heartbeat(self._write, lease_s / 6, "convgrid-sole-writer")

    @contextmanager
    def held(self) -> Iterator[None]:
        with self._thread_lock:
            if not self._taken:
                self._take()
            yield

    def _record(self) -> tuple[str, DriverInfo] | None:
        """(owner, the writer as the liveness rule sees it) of the record there, None where there is none."""
        try:
            body = json.loads(read_bytes(self.files.fs, self.files.abs(WRITER_FILE)))
            info = DriverInfo.of(body, str(body["owner"]), int(body["beat"]))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            return "?", DriverInfo("?", 0, "?", -1, 0.0, frozenset())  # not a record: judged by nothing but time
        return info.driver, info

    def _take(self) -> None:
        found = self._record()
        if found is not None and found[0] != self.owner:
            self._wait_out(found[1])
        ensure_dir(self.files.fs, self.files.abs(WRITER_FILE.rsplit("/", 1)[0]))
        self._write()
        self.heartbeat.start()
        self._taken = True
        atexit.register(self.close)

    def _wait_out(self, other: DriverInfo) -> None:
        """Return once `other` is dead or gone; SecondWriter once its beat moves."""
        liveness, first = Liveness(), other.beat
        told = False
        while liveness.alive(other, self.lease_s, self.clock()):
            if other.beat != first:
                who = f"host {other.host}, pid {other.pid}"
                raise SecondWriter(
                    f"another command writes the results root {self.files.base} ({who}), whose filesystem has no "
                    "lock convgrid can use: this one changes nothing. Run it once the other has finished (a writer "
                    f"that died is taken over once its record has been silent for {self.lease_s:g} s, "
                    "CONVGRID_LOCK_LEASE_S; at once when it ran in this process table)"
                )
            if not told:
                told = True
                warnings.warn(
                    f"convgrid: {self.files.abs(WRITER_FILE)} names another writer (host {other.host}, pid "
                    f"{other.pid}): waiting up to {self.lease_s:g} s for its beat to move (then this command "
                    "stops) or stay still (then it writes)",
                    SoleWriterWait,
                    stacklevel=5,
                )
            self.sleep(min(0.5, self.lease_s / 12))
            found = self._record()
            if found is None:
                return
            other = found[1]

    def _write(self) -> None:
        self._beat += 1
        body = {
            "owner": self.owner,
            "beat": self._beat,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "at": time.time(),
            **identity(),
        }
        write_bytes(self.files.fs, self.files.abs(WRITER_FILE), json.dumps(body).encode())

    def check(self) -> None:
        """Before a commit point: the record there is still this writer's, and its beat is young."""
        found = self._record()
        if found is None or found[0] != self.owner:
            who = f"host {found[1].host}, pid {found[1].pid}" if found is not None else "its record is gone"
            raise LockLost(
                f"another command writes the results root {self.files.base} ({who}), whose filesystem has no lock: "
                "this transaction is not committed"
            )
        age = self.heartbeat.age()
        if age >= self.lease_s / 2:
            raise LockLost(
                f"this writer's record of {self.files.base} was last renewed {age:.1f} s ago (lease "
                f"{self.lease_s:g} s): another may have taken the root over; this transaction is not committed"
            )

    def close(self) -> None:
        """Give the root back (at exit): the record goes if it is still this writer's."""
        with self._thread_lock:
            if not self._taken:
                return
            self._taken = False
            self.heartbeat.stop()
            found = self._record()
            if found is not None and found[0] == self.owner:
                delete_quietly(self.files.fs, self.files.abs(WRITER_FILE))
