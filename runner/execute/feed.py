"""The lazy feed of an executor: the items of an `execute` call, pulled from their source only as
workers free up, so a million-cell grid streams through without being held, and a tuner can ask
its next trial at the moment a run finishes.

The source is any iterable of `WorkItem | list[WorkItem] | None`. A list is a group that is never
split across chunks (trials meant to run as one batch). `None` means "nothing yet": the source waits
for runs in flight (a tuner whose next trial depends on them) and is asked again after the next
record. Items given back (a chunk lost with its worker) go to the front, as one group, and are
handed out first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator

from runner.execute.base import WorkItem, WorkSource

_END = object()


class Feed:
    """A bounded look-ahead over a lazy source of work items."""

    def __init__(self, items: WorkSource) -> None:
        self._source: Iterator[WorkItem | list[WorkItem] | None] = iter(items)
        self._buffer: deque[list[WorkItem]] = deque()  # groups; a single item is a group of one
        self._held = 0
        self.exhausted = False  # the source has no more items
        self.waiting = False  # the source's last answer was None: nothing until a run finishes

    def pull(self, n: int) -> None:
        """Hold up to `n` items, pulling from the source until it ends or waits."""
        self.waiting = False
        while self._held < n and not self.exhausted:
            item = next(self._source, _END)
            if item is _END:
                self.exhausted = True
            elif item is None:
                self.waiting = True
                return
            else:
                assert isinstance(item, WorkItem | list)
                self._hold(item if isinstance(item, list) else [item], at_front=False)

    def _hold(self, group: list[WorkItem], at_front: bool) -> None:
        if group:
            (self._buffer.appendleft if at_front else self._buffer.append)(group)
            self._held += len(group)

    @property
    def held(self) -> int:
        return self._held

    @property
    def dry(self) -> bool:
        """Whether the held items are all there is for now (the source ended or waits)."""
        return self.exhausted or self.waiting

    @property
    def done(self) -> bool:
        """Nothing held and nothing more will come."""
        return self.exhausted and not self._buffer

    def take(self, n: int, where: Callable[[WorkItem], bool] | None = None) -> list[WorkItem]:
        """Held items in order, whole groups only: up to `n` items, but at least the first group. With
        `where`, only the groups whose first item it accepts (the others stay held, in their order)."""
        out: list[WorkItem] = []
        kept: deque[list[WorkItem]] = deque()
        while self._buffer and (not out or len(out) + len(self._buffer[0]) <= n):
            group = self._buffer.popleft()
            if where is None or where(group[0]):
                out += group
            else:
                kept.append(group)
        self._buffer.extendleft(reversed(kept))
        self._held -= len(out)
        return out

    def front(self) -> list[WorkItem] | None:
        """The first held group (a source's list, or one item), without taking it; None if nothing is held."""
        return self._buffer[0] if self._buffer else None

    def peek(self) -> Iterator[WorkItem]:
        """The held items, in order, without taking them."""
        for group in self._buffer:
            yield from group

    def give_back(self, items: Iterable[WorkItem]) -> None:
        """Items to run again before anything else, in their order, as one group."""
        self._hold(list(items), at_front=True)
