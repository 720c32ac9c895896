"""Trials asked in processes of their own: the sampler's work beside the driver's, not under its GIL.

On a short objective a study's time is its asks: TPE fits its densities over every trial told so far,
and each ask writes three records to the storage. In one process, convgrid's driver or the threads of
`study.optimize(n_jobs=...)`, the asks take turns under the interpreter's lock whatever the cores:
asks on two threads only made each slower (measured, docs/performance_log.md). Optuna's own answer is
several processes on one storage, each asking its trials. Here the driver keeps the study (it tells,
prunes and stores every run, as before), and ask processes (one per trial in flight, up to half the
CPUs) answer its asks, one at a time each, on a pipe: each opens the same storage (a journal file or
an RDB, which processes share under its lock) with a sampler of its own, the plan's seeded seed+1+i
(processes seeded alike would propose the same points), and a trial asked there is RUNNING in the
storage, the driver's to tell like any other.

`CONVGRID_ASK_PROCESSES` says when: `auto` (default) once the driver's asks set the study's pace and
enough are left to pay the processes' start (`Asker`), `on` from the start, `off` never. Until a
process has opened the study the driver asks in its own; an ask process that fails or dies hands the
asking back to the driver, with a warning, and the study goes on (a trial it was asking when it died
stays RUNNING until the study's next start tells it FAIL).
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

import runner
from runner.execute.local import cpu_slots
from runner.tune.optuna_adapter import ASK, READY, Asked, AskServer, Study

JOIN_S = 5.0  # how long a closing ask process may take to finish its ask under way
# What an ask process costs the study: its start (an interpreter, Optuna, the study replayed from its
# storage) on a core the study would otherwise use, measured on a 2-core machine (docs/performance_log.md)
ASK_PROCESS_COST_S = 0.5


class AskProcessWarning(UserWarning):
    """An ask process failed; the driver asks in its own process from now on."""


class AskProcesses:
    def __init__(self, servers: list[AskServer]) -> None:
        self._idle: queue.SimpleQueue[Connection] = queue.SimpleQueue()  # ready and not asking
        self._lock = threading.Lock()
        self._ready = 0
        self._closing = False
        self.failed: str | None = None
        self._procs: list[tuple[subprocess.Popen[bytes], Connection]] = []
        self._openers: list[threading.Thread] = []  # each waits for its process to open the study
        for i, server in enumerate(servers):
            try:
                proc, conn = _start(server)
            except OSError as exc:  # no interpreter to start, no fds left: the driver asks (closed as usual)
                self._fail(f"it could not start: {exc}")
                return
            self._procs.append((proc, conn))
            opener = threading.Thread(target=self._opened, args=(conn,), name=f"convgrid-ask-open-{i}", daemon=True)
            opener.start()
            self._openers.append(opener)

    @property
    def ready(self) -> bool:
        """Whether an ask may go to a process (one has opened the study, and none failed)."""
        return self._ready > 0 and self.failed is None

    @property
    def opened(self) -> int:
        """How many processes have opened the study."""
        return self._ready

    def _opened(self, conn: Connection) -> None:
        """Wait (on a thread of its own) for a process to open the study."""
        try:
            message = conn.recv()
        except (EOFError, OSError):
            message = "it ended before opening the study"
        if message == READY:
            with self._lock:
                self._ready += 1
            self._idle.put(conn)
        else:
            self._fail(str(message))

    def _fail(self, why: str) -> None:
        with self._lock:
            if self._closing:
                return  # a pipe closed by `close` is no failure
            first = self.failed is None
            self.failed = self.failed or why
        if first:
            warnings.warn(
                f"convgrid: an ask process failed ({why}); asking in the driver", AskProcessWarning, stacklevel=3
            )

    def ask(self) -> Asked | None:
        """A trial asked in a process; None once asking there failed (the caller asks in its own)."""
        while self.failed is None:
            try:
                conn = self._idle.get(timeout=0.1)  # all busy: another thread's ask returns its process soon
            except queue.Empty:
                continue
            try:
                conn.send(ASK)
                answer = conn.recv()
            except (EOFError, OSError):
                self._fail("it ended while asking")
                return None
            if isinstance(answer, Asked):
                self._idle.put(conn)
                return answer
            self._fail(str(answer))
            return None
        return None

    def close(self) -> None:
        """Stop the processes once their ask under way is answered (the caller's asks are all through)."""
        with self._lock:
            self._closing = True
        for _, conn in self._procs:
            with contextlib.suppress(OSError):  # it is gone already
                conn.send(None)
        for proc, conn in self._procs:
            try:
                proc.wait(JOIN_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            conn.close()
        for opener in self._openers:
            opener.join(JOIN_S)  # its pipe is closed: it ends now
        self._procs.clear()


def _start(server: AskServer) -> tuple[subprocess.Popen[bytes], Connection]:
    """An ask process, `python -m runner.tune.ask_server FD`, on one end of a socket pair. Not
    multiprocessing's spawn: that imports the caller's __main__ again in the child, which runs a
    script without a main guard a second time. In a session of its own: Ctrl-C is the driver's to
    handle (it closes the processes after their ask under way); a driver that dies closes the pipe,
    and the process ends."""
    ours, theirs = socket.socketpair()
    root = str(Path(runner.__file__).resolve().parent.parent)  # this convgrid, wherever it was imported from
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner.tune.ask_server", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    finally:
        theirs.close()
    conn = Connection(ours.detach())
    conn.send(server)
    return proc, conn


def ask_process_count(parallel: int) -> int:
    """How many ask processes a study gets: one per trial in flight, up to half the CPUs (the other half
    runs the trials and the driver). On 2 cores one process, which measured faster than two: 600 short
    TPE trials in 5.0 / 4.7 / 5.6 s against 6.5 / 6.8 / 6.0 s (docs/performance_log.md)."""
    return max(1, min(parallel, cpu_slots() // 2))


class Asker:
    """Where a study's asks are made: in the driver, or in ask processes once they pay.

    `auto` starts them when the forecast says so: the driver's asks cannot keep pace with the runs
    (an ask, timed in the driver, takes longer than a run divided among the `parallel` slots: the
    driver, not the workers, sets the pace) and the asks left would take longer than the processes
    cost to start (`ASK_PROCESS_COST_S` each). `on` starts them at once; `off` never.
    """

    WINDOW = 8  # asks and runs timed: the latest few (TPE's first asks are random, and cheap)

    def __init__(self, study: Study, parallel: int, mode: str, clock: Callable[[], float] = time.perf_counter) -> None:
        self.study, self.parallel, self.mode, self.clock = study, parallel, mode, clock
        self._asks: deque[float] = deque(maxlen=self.WINDOW)  # seconds of the latest asks in the driver
        self._runs: deque[float] = deque(maxlen=self.WINDOW)  # seconds of the latest runs
        self.processes: AskProcesses | None = None
        if mode == "on":
            self._start()

    @property
    def remote(self) -> bool:
        """Whether asks now go to processes (so an ask under way leaves the driver free)."""
        return self.processes is not None and self.processes.ready

    def ask(self) -> Asked:
        """A new trial: asked in a process where one is ready, else here (and timed). Any thread."""
        if self.processes is not None and self.processes.ready:
            asked = self.processes.ask()
            if asked is not None:
                return asked
        t0 = self.clock()
        asked = self.study.ask()
        self._asks.append(self.clock() - t0)
        return asked

    def ran(self, run_s: float, left: int) -> None:
        """A run took `run_s`, `left` trials are still to ask: start the processes if that now pays."""
        self._runs.append(run_s)
        if self.mode != "auto" or self.processes is not None or len(self._asks) < self.WINDOW:
            return
        ask_s = statistics.fmean(self._asks)
        driver_bound = ask_s * self.parallel > statistics.fmean(self._runs)
        if driver_bound and left * ask_s > ASK_PROCESS_COST_S * ask_process_count(self.parallel):
            self._start()

    def _start(self) -> None:
        servers = self.study.ask_servers(ask_process_count(self.parallel))
        if servers:
            self.processes = AskProcesses(servers)

    def close(self) -> None:
        if self.processes is not None:
            self.processes.close()
            self.processes = None
