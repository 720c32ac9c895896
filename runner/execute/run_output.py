"""What a run prints, warns and logs, kept with its record (issue 46).

While a run computes (`capture`), everything its thread writes to `sys.stdout` and `sys.stderr`, every
warning shown in it and every `logging` record emitted in it go, in the order they happen, into the
run's own bounded buffer (`OutputTail`: the last `LIMIT` characters, with a marker line saying how much
came before), and on to where they went before (the terminal, Ray's worker log): the capture is a tee.
The routing is per thread, so the runs of the in-process executor's threads (runner.execute.threads)
each keep their own output, not one interleaved stream; a run's output is what its thread wrote, so
output of threads a learner starts itself, and of C code writing to file descriptors 1 and 2 directly,
is not its.

Warnings: the registry that shows a warning once per code location would hide a warning from every
run of a process but the first, so while captures are installed Python's default action is "always"
(an appended filter: filters a user or a library set still win) and the capture itself shows each
distinct warning once per run; outside runs (the driver's own threads) each distinct warning is still
shown once per process, as before. Logging: a handler on the root logger takes the records its loggers
let through (WARNING and up unless configured otherwise); where no other handler is configured, records
outside runs are handed to `logging.lastResort` as before.

Nothing a run printed is lost when its worker dies: `live(sink, ended)` makes every capture of this
process hand its text to `sink(run_ids, text)` at most every `LIVE_EVERY_S` seconds while it changes (a
Ray actor writes it under the store's incoming area: runner.execute.live_output), and `ended(run_ids)`
once the run is over (its record carries the output then). `snapshot` reads a capture in progress.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO

LIMIT = 64 * 1024  # characters kept per run: the tail, after a marker line
LIVE_EVERY_S = 0.5  # how often a live sink is handed a changed capture
LiveSink = Callable[[Sequence[str], str], None]
Ended = Callable[[Sequence[str]], None]

_local = threading.local()
_lock = threading.Lock()
_live: dict[int, OutputTail] = {}  # id -> the captures in progress, for the live thread
_sink: tuple[LiveSink, Ended] | None = None
_shown: set[tuple[Any, ...]] = set()  # warnings shown outside runs (the "default" action, process-wide)
_ALWAYS = ("always", None, Warning, None, 0)


class OutputTail:
    """The bounded text of one run (or one batched call of several): the last `limit` characters
    written, and how many came before them."""

    def __init__(self, run_ids: Sequence[str], limit: int = LIMIT) -> None:
        self.run_ids, self.limit = tuple(run_ids), limit
        self._chunks: deque[str] = deque()
        self._size = 0
        self.dropped = 0  # characters written before the kept tail
        self.version = 0  # bumped by each write: the live thread hands on changed captures only
        self._warned: set[tuple[Any, ...]] = set()
        self._guard = threading.Lock()

    def write(self, text: str) -> None:
        if not text:
            return
        with self._guard:
            if len(text) > self.limit:
                self.dropped += len(text) - self.limit
                text = text[-self.limit :]
            self._chunks.append(text)
            self._size += len(text)
            while self._size > self.limit:
                over = self._size - self.limit
                first = self._chunks[0]
                if len(first) <= over:
                    self._chunks.popleft()
                    cut = len(first)
                else:
                    self._chunks[0] = first[over:]
                    cut = over
                self._size -= cut
                self.dropped += cut
            self.version += 1

    def text(self) -> str:
        """The kept tail, after a marker line where earlier output was dropped ("" when nothing was written)."""
        with self._guard:
            body = "".join(self._chunks)
            dropped = self.dropped
        if not dropped:
            return body
        return f"[convgrid: {dropped:,} earlier characters dropped; the last {len(body):,} follow]\n{body}"

    def warn_once(self, key: tuple[Any, ...]) -> bool:
        """True the first time this run shows the warning `key`."""
        if key in self._warned:
            return False
        self._warned.add(key)
        return True


def current() -> OutputTail | None:
    """The capture of the calling thread's run, if a run is computing in it."""
    return getattr(_local, "tail", None)


@contextlib.contextmanager
def capture(run_ids: Sequence[str], limit: int = LIMIT) -> Iterator[OutputTail]:
    """Route this thread's output, warnings and logging records to a fresh buffer while the block runs
    (see the module). Nested captures are not expected; the outer one resumes after an inner one."""
    _install()
    tail = OutputTail(run_ids, limit)
    outer = current()
    _local.tail = tail
    with _lock:
        _live[id(tail)] = tail
    try:
        yield tail
    finally:
        _local.tail = outer
        with _lock:
            _live.pop(id(tail), None)
            sink = _sink
        if sink is not None and tail.version:
            with contextlib.suppress(Exception):  # its record carries the output from here on
                sink[1](tail.run_ids)


def snapshot(run_id: str) -> str | None:
    """The output so far of the run `run_id` computing in this process (any thread), or None."""
    with _lock:
        tails = [t for t in _live.values() if run_id in t.run_ids]
    return tails[0].text() if tails else None


@contextlib.contextmanager
def live(sink: LiveSink, ended: Ended) -> Iterator[None]:
    """While the block runs, hand every capture of this process to `sink` as it changes (at most every
    LIVE_EVERY_S seconds, from a daemon thread), and tell `ended` when a capture that wrote anything is
    over. A sink that raises is skipped for that hand-over only: a run never fails for its log."""
    global _sink
    stop = threading.Event()
    with _lock:
        _sink = (sink, ended)
    thread = threading.Thread(target=_live_loop, args=(sink, stop), name="convgrid-live-output", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        with _lock:
            _sink = None


def _live_loop(sink: LiveSink, stop: threading.Event) -> None:
    sent: dict[int, int] = {}
    while not stop.wait(LIVE_EVERY_S):
        with _lock:
            tails = list(_live.items())
        for key, tail in tails:
            if tail.version != sent.get(key):
                sent[key] = tail.version
                _hand_on(sink, tail)
        sent = {k: v for k, v in sent.items() if k in dict(tails)}


def _hand_on(sink: LiveSink, tail: OutputTail) -> None:
    with contextlib.suppress(Exception):
        sink(tail.run_ids, tail.text())


class _Tee:
    """sys.stdout or sys.stderr while captures are installed: what a capturing thread writes goes to its
    run's buffer and on to the stream it replaced; other threads write to that stream alone."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        tail = current()
        if tail is not None:
            tail.write(text)
        return self.inner.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer: the real stream's
        return getattr(self.inner, name)


class _RunLogHandler(logging.Handler):
    """Logging records of a capturing thread into its run's buffer; outside runs, Python's last resort
    where no other handler is configured (what happened before this handler existed)."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        alone = all(h is self for h in logging.getLogger().handlers)
        tail = current()
        if tail is not None:
            with contextlib.suppress(Exception):
                tail.write(self.format(record) + "\n")
            if alone and logging.lastResort is not None and record.levelno >= logging.lastResort.level:
                # shown where it went before, but not captured a second time through the tee
                _raw(sys.stderr).write(self.format(record) + "\n")
            return
        if alone and logging.lastResort is not None and record.levelno >= logging.lastResort.level:
            logging.lastResort.handle(record)


def _raw(stream: Any) -> Any:
    return stream.inner if isinstance(stream, _Tee) else stream


_handler = _RunLogHandler()


def _showwarning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    key = (str(message), category, filename, lineno)
    tail = current()
    if tail is not None:
        if tail.warn_once(key):
            tail.write(warnings.formatwarning(message, category, filename, lineno, line))
            # and on to where it went before (the terminal, or a `catch_warnings(record=True)` around the run),
            # past this thread's tee so that the run does not keep it twice
            _previous(message, category, filename, lineno, _raw(file or sys.stderr), line)
        return
    with _lock:
        if key in _shown:
            return
        _shown.add(key)
    _previous(message, category, filename, lineno, file, line)


_previous: Callable[..., None] = warnings.showwarning


def _install() -> None:
    """Put the tees, the warnings hook and the logging handler in place where they are not (pytest and
    `catch_warnings` put their own back between runs, so this is checked at each capture)."""
    global _previous
    with _lock:
        if not isinstance(sys.stdout, _Tee):
            sys.stdout = _Tee(sys.stdout)
        if not isinstance(sys.stderr, _Tee):
            sys.stderr = _Tee(sys.stderr)
        if warnings.showwarning is not _showwarning:
            _previous = warnings.showwarning
            warnings.showwarning = _showwarning
        if _ALWAYS not in warnings.filters:
            warnings.filterwarnings("always", append=True)
        root = logging.getLogger()
        if _handler not in root.handlers:
            root.addHandler(_handler)
