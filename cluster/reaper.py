"""The Ray a driver starts dies with it, however the driver dies (issue 44).

An embedded Ray (`connect(None)`) is a tree of processes under the driver: GCS, raylet, dashboard and
log monitor, and under the raylet its DashboardAgent and RuntimeEnvAgent. `ray.shutdown` stops them
all, and most of them share the driver's fate on their own; but a SIGKILLed driver (an OOM kill, a
scheduler's kill -9) left the two agents running for good, holding ports and memory.

So the driver starts one small watcher process (`start`), in a session of its own, holding the read
end of a pipe whose write end only the driver has. The watcher looks at the driver's descendants (pid
and start time, from /proc) at once, tells the driver it has (so `start` returns only once everything
the driver has started so far is known: a driver killed a moment after its Ray came up leaks nothing),
and then every LOOK_S. Once the pipe reads end-of-file (the driver is gone, by whatever means), it
takes everything it ever saw that is still the same process (pid and start time: never a pid reused
by another process since), adds what those have started since its last look (the raylet may start a
worker or an agent between two looks and outlive the driver by a moment), and kills them. It kills
nothing else: only processes the driver started, and only after the driver is gone. A driver that
ends normally has stopped its Ray already. Linux only (/proc); elsewhere nothing is started.

The watcher runs this file by its path, importing nothing of convgrid: importing the `cluster`
package pulls in pydantic and the settings, which under load delayed its first look by seconds.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

LOOK_S = 1.0  # a process the driver started is watched from this long after it started
GRACE_S = 2.0  # between SIGTERM and SIGKILL of what is left
_PIPE: int | None = None  # the write end, held until this process exits


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every process /proc shows."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 19:
            found[int(entry)] = (int(fields[1]), fields[19].decode())
    return found


def descendants(*pids: int) -> dict[int, str]:
    """pid -> start time of every process under any of `pids` (from one look at /proc)."""
    table = _table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found, todo = {}, list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = table[child][1]
            todo.append(child)
    return found


def still_running(pids: dict[int, str]) -> dict[int, str]:
    table = _table()
    return {pid: start for pid, start in pids.items() if pid in table and table[pid][1] == start}


def reap(pids: dict[int, str]) -> int:
    """SIGTERM, then SIGKILL after GRACE_S, to those of `pids` that are still the same processes; how many."""
    alive = still_running(pids)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + GRACE_S
    while still_running(alive) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in still_running(alive):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return len(alive)


def watch(driver: int, pipe: int, ready: int) -> None:
    """In the watcher: look at `driver`'s descendants until `pipe` reads end-of-file, then reap them.

    Writes one byte to `ready` after the first look."""
    seen: dict[int, str] = {}
    me = os.getpid()
    first = True
    while True:
        seen = still_running(seen) | {pid: start for pid, start in descendants(driver).items() if pid != me}
        if first:
            with contextlib.suppress(BrokenPipeError):  # the driver stopped waiting (start's timeout)
                os.write(ready, b".")
            os.close(ready)
            first = False
        ready_to_read, _, _ = select.select([pipe], [], [], LOOK_S)
        if ready_to_read and not os.read(pipe, 1):
            break
    survivors = still_running(seen)
    survivors |= {pid: start for pid, start in descendants(*survivors).items() if pid != me}
    reap(survivors)


def start(timeout_s: float = 30.0) -> None:
    """Start this process's watcher (once; Linux only); return once it has looked at our descendants.

    `timeout_s` bounds the wait for that first look; past it the watcher still runs and looks later."""
    global _PIPE
    if _PIPE is not None or not os.path.isdir("/proc/self"):
        return
    read_end, write_end = os.pipe()  # neither is inherited by other children (PEP 446)
    watcher = subprocess.Popen(
        [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid())],
        stdin=read_end,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C to the driver's terminal is not the watcher's
        close_fds=True,
    )
    os.close(read_end)
    _PIPE = write_end
    assert watcher.stdout is not None
    with watcher.stdout:
        select.select([watcher.stdout], [], [], timeout_s)  # its first look done (or it failed to start)


if __name__ == "__main__":
    watch(int(sys.argv[1]), sys.stdin.fileno(), sys.stdout.fileno())
