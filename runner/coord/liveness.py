"""One heartbeat and one liveness rule for everything that must tell a live process from a dead one:
the drivers sharing a grid (runner.coord.claims) and the writers queued for an object store's lock
(runner.coord.lease_lock).

A process proves it lives by changing a beat (a counter in a small file) every period. An observer
judges only by what it sees change on its own monotonic clock: a beat unchanged for a lease is dead. No
two machines' clocks are ever compared. A process of the observer's own process table whose pid is gone
(or holds another process, started at another time) is dead at once, so rerunning a SIGKILLed command
does not wait a lease.

"Own process table" is not "same host name" (issue 44): containers with host networking, common with
Ray, share a host name and not their pids, so a live writer there was judged dead at once (two holders
of the object-store lock, a live session's staged parts deleted, claims taken from a live driver). A
process is identified by its pid table (`pid_table`: the kernel's boot id and the pid namespace's
inode, hashed) and its start time (`start_time`, clock ticks since boot from /proc/<pid>/stat); a record
without them (written by an older convgrid, or where /proc is not Linux's) is judged by its beat alone.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Clock = Callable[[], float]


@dataclass
class DriverInfo:
    driver: str
    beat: int
    host: str
    pid: int
    at: float  # the process's wall clock at this beat: shown by `status`, never compared across machines
    done: frozenset[int]  # blocks it has finished (claims only)
    table: str = ""  # its process table (`pid_table`); "" unknown
    start: str = ""  # its start time (`start_time`); "" unknown

    @classmethod
    def of(cls, body: Mapping[str, Any], driver: str, beat: int, done: frozenset[int] = frozenset()) -> DriverInfo:
        """A record's body (host, pid, at, and table and start where it has them) as the liveness rule
        reads it; KeyError, ValueError or TypeError for a body that is not one."""
        return cls(
            driver,
            beat,
            str(body["host"]),
            int(body["pid"]),
            float(body["at"]),
            done,
            str(body.get("table", "")),
            str(body.get("start", "")),
        )


@functools.cache
def pid_table() -> str:
    """This process's pid table: a hash of the kernel's boot id (a random id per boot) and the inode of
    its pid namespace. Equal only for processes that see the same pids; "" where /proc cannot tell."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return hashlib.sha256(f"{boot}|{namespace}".encode()).hexdigest()[:16]


def start_time(pid: int) -> str:
    """When process `pid` of this table started (field 22 of /proc/<pid>/stat, clock ticks since boot):
    a pid reused by a later process has another. "" where it cannot be read (gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return ""
    fields = stat[stat.rfind(b")") + 2 :].split()  # after the command name, which may hold spaces
    return fields[19].decode() if len(fields) > 19 else ""


def identity() -> dict[str, str]:
    """What a record of this process says of it beside host and pid (see the module)."""
    return {"table": pid_table(), "start": start_time(os.getpid())}


def gone_here(table: str, pid: int, start: str) -> bool:
    """Whether the process a record names is certainly gone: it ran in this process table (boot id and
    pid namespace: same machine, same pids) and its pid is free now, or holds a process started at
    another time. False whenever that cannot be told: another table, or a record without one."""
    if not table or table != pid_table():
        return False
    if not pid_running(pid):
        return True
    now = start_time(pid)
    return bool(start) and bool(now) and now != start


def running_here(table: str, pid: int, start: str) -> bool:
    """Whether the process a record names certainly runs: this process table, its pid taken, by a
    process started when the record says (where it says)."""
    if not table or table != pid_table() or not pid_running(pid):
        return False
    return not start or start_time(pid) in ("", start)


def pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, another user's
    return True


@dataclass
class Liveness:
    """What this process saw of each driver's beat, and when (its own monotonic clock)."""

    seen: dict[str, tuple[int, float]] = field(default_factory=dict)

    def alive(self, info: DriverInfo | None, lease_s: float, now: float) -> bool:
        if info is None:
            return False  # ended (its file deleted) or never existed
        if gone_here(info.table, info.pid, info.start):
            return False  # a process of this process table that is gone: no need to wait a lease
        last = self.seen.get(info.driver)
        if last is None or last[0] != info.beat:
            self.seen[info.driver] = (info.beat, now)
            return True
        return now - last[1] < lease_s


class Heartbeat:
    """Calls `beat()` every `period_s` on a thread of its own until stopped, and remembers on this
    process's monotonic clock when its last successful beat began (`age`). A beat that fails with an
    OSError is skipped: the next one may get through, and the owner reads `age` where it matters (a
    lease-holder refuses to commit on a stale one).

    A process stopped (SIGSTOP, a suspended machine) or starved stops beating without knowing it; the
    monotonic clock goes on. So the thread measures the gap between its own wake-ups: one longer than
    `lapse_s`, or no successful beat for that long, means observers may have counted this process dead,
    and `lapsed()` says so (once) to the owner, which then checks what it still holds."""

    def __init__(
        self,
        beat: Callable[[], None],
        period_s: float,
        name: str,
        clock: Clock = time.monotonic,
        lapse_s: float | None = None,
    ) -> None:
        self._beat, self.period_s, self.name, self.clock = beat, period_s, name, clock
        self.lapse_s = lapse_s if lapse_s is not None else 2 * period_s
        self.last_success = clock()
        self._lapsed = threading.Event()
        self._told: float | None = None  # last_success when a lapse was last reported
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, last_success: float | None = None) -> None:
        """Beat every period from now on; `last_success`: when the beat the owner made itself began."""
        self.last_success = self.clock() if last_success is None else last_success
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        previous = self.clock()
        while not self._stop.wait(self.period_s):
            started = self.clock()
            if started - previous > self.lapse_s or started - self.last_success > self.lapse_s:
                self._lapsed.set()  # this process stood still, or could not beat, for longer than it may
            previous = started
            try:
                self._beat()
            except OSError:
                continue
            self.last_success = started

    def lapsed(self) -> bool:
        """Whether the beats lapsed since the last time this was asked (see the class): the thread saw
        a gap, or (asked before the thread woke after a pause) the last good beat is older than `lapse_s`."""
        stale = self.clock() - self.last_success > self.lapse_s and self._told != self.last_success
        if self._lapsed.is_set() or stale:
            self._lapsed.clear()
            self._told = self.last_success  # one answer per lapse
            return True
        return False

    def age(self) -> float:
        """Seconds since the last successful beat began."""
        return self.clock() - self.last_success

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
