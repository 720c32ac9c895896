"""How a lazy work source that answered None ("nothing yet") says it has something again.

A source answers None while it waits: a tuner whose next trials are still being asked on other
threads. An executor asks such a source again after its next record, which is late when the answer
comes from elsewhere: a study's driver that waited for its ask in the executor's thread could not take
in the records of the runs finishing meanwhile, and its asks ran one after the other instead of beside
each other as in `study.optimize(n_jobs=...)`'s threads. With a doorbell, the source rings when its
answer is ready, from any thread, and an executor that listens pulls at once.

Only an executor whose wait can be interrupted listens (the in-process executor's threads:
runner.execute.local); a source must not count on a ring unless `listening` says someone hears it,
and otherwise waits for its answer in the executor's thread, as before.

The same executor also calls the source's `on_record`, where it has one, with each record in the thread
whose run made it, before the record reaches the caller: a tuner tells the trial there and asks the next
one, in the order of `study.optimize`'s threads, instead of waiting for its driver thread to take the
record in (runner.tune.schedule). An executor that does not listen never calls it, and the source then
learns of a record only from the caller, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runner.store.records import RunRecord


class Doorbell:
    def __init__(self, on_record: Callable[[RunRecord], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._listener: Callable[[], None] | None = None
        self.on_record = on_record  # called by a listening executor in the thread whose run made the record

    @property
    def listening(self) -> bool:
        return self._listener is not None

    @contextmanager
    def listen(self, wake: Callable[[], None]) -> Iterator[None]:
        """While inside, every ring calls `wake` (from the ringing thread: it must be quick and thread-safe)."""
        with self._lock:
            assert self._listener is None, "one listener at a time"
            self._listener = wake
        try:
            yield
        finally:
            with self._lock:
                self._listener = None

    def ring(self) -> None:
        with self._lock:
            wake = self._listener
        if wake is not None:
            wake()  # outside the lock: a listener that leaves meanwhile gets a harmless extra wake
