"""Group commit: a driver hands its flushes to one writer thread, which commits everything handed to
it since its last commit as one transaction.

A durable commit costs a few fsyncs in sequence (runner.store.txn: the staged parts, the staging
folder, the marker, the published folders), 5-10 ms each on an ordinary disk, whatever its size. Made
in the driver's thread, they cap a driver at one flush per commit latency; made here, the driver goes
on running cells while the previous flush commits, and flushes that arrive during a commit share the
next one. What a crash can lose grows from the records buffered (one flush window) to those plus the
ones being committed; nothing committed is ever lost or seen half-written.

`submit` never blocks on the disk; `drain` waits until everything submitted is committed (the end of
a wave, of a grid, Ctrl-C); a commit's exception is raised by the next `submit` or `drain`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """Commits lists of items with `commit(items) -> results`, in one background thread, batching."""

    def __init__(self, commit: Callable[[Sequence[T]], list[R]]) -> None:
        self._commit = commit
        self._pending: list[T] = []
        self._results: list[R] = []
        self._error: BaseException | None = None
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="convgrid-group-commit", daemon=True)
        self._thread.start()

    def submit(self, items: Sequence[T]) -> None:
        with self._cond:
            self._raise()
            self._pending.extend(items)
            self._cond.notify_all()

    def drain(self) -> list[R]:
        """Wait until everything submitted is committed; returns (and forgets) the commits' results."""
        with self._cond:
            while (self._pending or self._busy) and self._error is None:
                self._cond.wait()
            self._raise()
            results, self._results = self._results, []
            return results

    def close(self) -> list[R]:
        try:
            return self.drain()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
                self._busy = True
            try:
                results = self._commit(batch)
            except BaseException as exc:  # noqa: BLE001 - handed to the submitting thread by submit/drain
                with self._cond:
                    self._error = exc
                    self._busy = False
                    self._cond.notify_all()
                continue
            with self._cond:
                self._results.extend(results)
                self._busy = False
                self._cond.notify_all()
