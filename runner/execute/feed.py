"""The lazy feed of an executor: the items of an `execute` call, pulled from their source only as
workers free up, so a million-cell grid streams through without being held, and a tuner can ask
its next trial at the moment a run finishes.

The source is any iterable of `WorkItem | None`. `None` means "nothing yet": the source waits for
runs in flight (a tuner whose next trial depends on them) and is asked again after the next record.
Items given back (a chunk lost with its worker) go to the front and are handed out first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

from runner.execute.base import WorkItem

_END = object()


class Feed:
    """A bounded look-ahead over a lazy source of work items."""

    def __init__(self, items: Iterable[WorkItem | None]) -> None:
        self._source: Iterator[WorkItem | None] = iter(items)
        self._buffer: deque[WorkItem] = deque()
        self.exhausted = False  # the source has no more items
        self.waiting = False  # the source's last answer was None: nothing until a run finishes

    def pull(self, n: int) -> None:
        """Hold up to `n` items, pulling from the source until it ends or waits."""
        self.waiting = False
        while len(self._buffer) < n and not self.exhausted:
            item = next(self._source, _END)
            if item is _END:
                self.exhausted = True
            elif item is None:
                self.waiting = True
                return
            else:
                assert isinstance(item, WorkItem)
                self._buffer.append(item)

    @property
    def held(self) -> int:
        return len(self._buffer)

    @property
    def dry(self) -> bool:
        """Whether the held items are all there is for now (the source ended or waits)."""
        return self.exhausted or self.waiting

    @property
    def done(self) -> bool:
        """Nothing held and nothing more will come."""
        return self.exhausted and not self._buffer

    def take(self, n: int) -> list[WorkItem]:
        """Up to `n` held items, in order (call `pull` first)."""
        return [self._buffer.popleft() for _ in range(min(n, len(self._buffer)))]

    def give_back(self, items: Iterable[WorkItem]) -> None:
        """Items to run again before anything else, in their order."""
        self._buffer.extendleft(reversed(list(items)))
