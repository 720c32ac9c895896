"""One driver per study at a time: a lease in the results root, taken before the study is opened.

Two `convgrid tune` of one study used to run side by side: the second FAILed the trials the first had
in flight (its start-up recovery), the first then crashed telling them ("Cannot tell a FAIL trial"),
a trial was left RUNNING and trials/ got duplicate rows. Now the second one stops before it changes
anything, with one message naming the study, the holder's host and pid and what to do.

    _store/studies/<key>/g<n>.json   generation n: the holder (study, storage, host, pid, owner)
    _store/studies/<key>/g<n>.beat   its heartbeat: a counter rewritten every `beat_s`
    _store/studies/<key>/g<n>.free   generation n released

`<key>` hashes the study's name and its storage's label: a name is one study per storage. The newest
generation holds the study. A driver takes it by creating the next generation with the root's
create-if-absent (runner.fs.exclusive): of several racing, one wins and the others look again. It
may do so when the newest is free, or dead by the one liveness rule (runner.coord.liveness): its pid
gone in this process table (at once), or its beat unchanged for a lease on this driver's own clock. A holder
that beats is never taken over; the driver that finds one raises StudyBusy as soon as it has seen the
beat move (or at once, for a live pid on this host whose beat file the same clock saw written within
a lease).

A lease cannot stop a holder paused past it (SIGSTOP, a suspended laptop) from resuming. Each beat
first looks whether a newer generation exists, and `check` (before the driver tells trials or writes
rows) raises StudyBusy where one does, or where this holder's last beat is older than half a lease.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
import uuid
import warnings
from collections.abc import Callable

from runner.coord.liveness import Clock, DriverInfo, Heartbeat, Liveness, identity, running_here
from runner.errors import Busy
from runner.fs.exclusive import ExclusiveCreate
from runner.fs.files import delete_quietly, read_bytes, write_bytes
from runner.fs.root import Root

LEASE_DIR = "_store/studies"
# Generations kept behind the holder's (a driver whose listing was stale re-creates an old number only
# after this many newer ones were made, which it then sees and withdraws).
KEEP_GENERATIONS = 16
GENERATION = re.compile(r"^g(\d+)\.(json|beat|free)$")


class GarbageLeaseWarning(UserWarning):
    """A study lease file that does not decode: taken over only once its beat stood still for a lease."""


class StudyBusy(Busy):
    """Another driver holds the study (or took it over from this one)."""


def lease_key(study: str, storage: str) -> str:
    return hashlib.sha256(f"{storage}\0{study}".encode()).hexdigest()[:24]


class StudyLease:
    """The lease of one study in one storage, kept in a results root."""

    def __init__(
        self,
        files: Root,
        exclusive: ExclusiveCreate,
        study: str,
        storage: str,
        lease_s: float = 30.0,
        clock: Clock = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        host: str | None = None,
    ) -> None:
        # `clock` and `sleep` time what this driver observes of a holder (tests pass fake ones); the
        # heartbeat keeps the real monotonic clock. `host`: as whom this driver signs (tests).
        self.files, self.exclusive, self.study, self.storage = files, exclusive, study, storage
        self.lease_s, self.clock, self.sleep = lease_s, clock, sleep
        self.host = host or socket.gethostname()
        self.folder = f"{LEASE_DIR}/{lease_key(study, storage)}"
        self.owner = f"{self.host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.beat_s = min(1.0, lease_s / 6)  # a driver that finds the study taken waits about this long
        self.generation: int | None = None
        self.superseded: DriverInfo | None = None  # who took the study over, as this holder's beat saw
        self._count = 0
        self._beating = False
        self._told: set[int] = set()  # generations whose unreadable file was reported
        self.heartbeat = Heartbeat(self.beat, self.beat_s, "convgrid-study-lease")

    # ---- files -------------------------------------------------------------------------------------
    def _rel(self, gen: int, kind: str) -> str:
        return f"{self.folder}/g{gen:09d}.{kind}"

    def _generations(self) -> dict[int, set[str]]:
        found: dict[int, set[str]] = {}
        for info in self.files.listing(self.folder):
            match = GENERATION.match(info.base_name)
            if match is not None:
                found.setdefault(int(match[1]), set()).add(match[2])
        return found

    def _holder(self, gen: int) -> DriverInfo | None:
        """Generation `gen`'s holder (beat 0 before its first), None once its file is gone. A file that
        does not decode is a holder nobody can name, judged by its beat alone."""
        try:
            raw = read_bytes(self.files.fs, self.files.abs(self._rel(gen, "json")))
        except FileNotFoundError:
            return None
        try:
            beat = int(read_bytes(self.files.fs, self.files.abs(self._rel(gen, "beat"))))
        except (FileNotFoundError, ValueError):
            beat = 0
        try:
            body = json.loads(raw)
            host, pid, at = str(body["host"]), int(body["pid"]), float(body["at"])
            table, start = str(body.get("table", "")), str(body.get("start", ""))
        except (ValueError, KeyError, TypeError) as exc:
            host, pid, at, table, start = "?", -1, 0.0, "", ""
            if gen not in self._told:  # a wait of a lease must never be silent (issue 44)
                self._told.add(gen)
                warnings.warn(
                    f"convgrid: the study lease file {self.files.abs(self._rel(gen, 'json'))} is not one convgrid "
                    f"wrote ({type(exc).__name__}; damaged, or put there): study {self.study!r} is taken over once "
                    f"its beat file has stood unchanged for {self.lease_s:g} s (CONVGRID_LEASE_S)",
                    GarbageLeaseWarning,
                    stacklevel=4,
                )
        return DriverInfo(f"g{gen}", beat, host, pid, at, frozenset(), table, start)

    def _written_within_lease(self, gen: int) -> bool:
        """Whether this host's clock saw the holder's beat (or its file) written within a lease: one
        machine, one clock, so file times may be compared with it."""
        newest = 0.0
        for kind in ("beat", "json"):
            info = self.files.fs.get_file_info(self.files.abs(self._rel(gen, kind)))
            if info.mtime is not None:
                newest = max(newest, info.mtime.timestamp())
        return time.time() - newest < self.lease_s

    # ---- taking and giving back --------------------------------------------------------------------
    def acquire(self, beat: bool = True) -> None:
        """Take the study, or raise StudyBusy having changed nothing. `beat=False`: no heartbeat thread
        (tests beat by hand)."""
        body = {"study": self.study, "storage": self.storage, "owner": self.owner, "host": self.host}
        while True:
            gens = self._generations()
            newest = max((g for g, kinds in gens.items() if "json" in kinds), default=-1)
            if newest >= 0 and "free" not in gens[newest] and not self._dead(newest):
                continue  # the holder went away on its own (freed, or a newer one came): look again
            mine = newest + 1
            # signing as another host (tests) names no process table of this one
            ident = identity() if self.host == socket.gethostname() else {}
            data = json.dumps({**body, "pid": os.getpid(), "at": time.time(), **ident}).encode()
            if not self.exclusive.create(self.files.abs(self._rel(mine, "json")), data):
                continue  # another driver took this number first: judge it in turn
            if any(g > mine for g in self._generations()):
                delete_quietly(self.files.fs, self.files.abs(self._rel(mine, "json")))
                continue  # the listing was stale: a newer generation exists
            self.generation, self._count, self.superseded = mine, 0, None
            self._prune(mine)
            if beat:
                self.heartbeat.start()
                self._beating = True
            return

    def _dead(self, gen: int) -> bool:
        """Watch generation `gen` until it is dead (True) or gone (False); raise StudyBusy once it
        proves alive."""
        holder = self._holder(gen)
        if holder is None:
            return False
        if running_here(holder.table, holder.pid, holder.start) and self._written_within_lease(gen):
            raise self._busy(holder)
        liveness = Liveness()
        first = holder.beat
        while True:
            if not liveness.alive(holder, self.lease_s, self.clock()):
                return True
            if holder.beat != first:
                raise self._busy(holder)
            self.sleep(self.beat_s / 2)
            gens = self._generations()
            if "free" in gens.get(gen, set()) or any(g > gen for g in gens):
                return False
            holder = self._holder(gen)
            if holder is None:
                return False

    def _busy(self, holder: DriverInfo) -> StudyBusy:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.at)) if holder.at else "?"
        return StudyBusy(
            f"study {self.study!r} is being run by another driver (host {holder.host}, pid {holder.pid}, since "
            f"{since}) on this results root; nothing was changed. Wait for it to finish, or stop it and run this "
            f"again: a driver that died is taken over once its beat has been silent for {self.lease_s:g} s "
            "(CONVGRID_LEASE_S), at once when it ran in this process table (this machine and pid namespace)"
        )

    def _prune(self, mine: int) -> None:
        for gen, kinds in self._generations().items():
            if gen < mine - KEEP_GENERATIONS:
                for kind in sorted(kinds, key=lambda k: k != "json"):  # the generation file first
                    delete_quietly(self.files.fs, self.files.abs(self._rel(gen, kind)))

    def beat(self) -> None:
        """One heartbeat: look for a newer generation first (this holder was paused and taken over),
        then rewrite the beat."""
        if self.generation is None or self.superseded is not None:
            return
        newer = [g for g in self._generations() if g > self.generation]
        if newer:
            self.superseded = self._holder(max(newer)) or DriverInfo("?", 0, "?", -1, 0.0, frozenset())
            return
        self._count += 1
        write_bytes(self.files.fs, self.files.abs(self._rel(self.generation, "beat")), str(self._count).encode())

    def check(self) -> None:
        """Raise StudyBusy unless this driver still holds the study: no newer generation, and a beat
        younger than half a lease (a taker waits a full one)."""
        if self.generation is None:
            raise StudyBusy(f"study {self.study!r}: this driver holds no lease")
        if self.superseded is None and (not self._beating or self.heartbeat.age() >= self.lease_s / 2):
            self.beat()  # no beat thread, or it was paused or starved: look now
        if self.superseded is not None:
            other = self.superseded
            raise StudyBusy(
                f"study {self.study!r} was taken over by another driver (host {other.host}, pid {other.pid}) "
                f"while this one was stopped for more than {self.lease_s:g} s; this driver stops here. Its told "
                "trials are in the study; run it again once the other has finished"
            )

    def release(self) -> None:
        self.heartbeat.stop()
        self._beating = False
        gen, self.generation = self.generation, None
        if gen is None or self.superseded is not None:
            return  # taken over: the generation is the taker's history, not ours to free
        write_bytes(self.files.fs, self.files.abs(self._rel(gen, "free")), b"")
