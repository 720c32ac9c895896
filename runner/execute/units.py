"""What the in-process executor runs as one call: the units it cuts from its lazy source.

A unit is a run of consecutive items with one batch key (runner.execute.batching; at most `max_batch`),
or one item that has no key, or a source's group whole (trials meant to run as one batch). Items are
pulled only as far as the unit needs: a run of equal keys is complete once the item after it has
another key or the run is full, so a grid's generator is read at most one item ahead and a tuner is
asked its next trial only when a worker could take it.

Once the source has nothing more for now (it ended, or it waits for runs in flight), the run held is cut
into fair shares of the executor's slots, as the Ray driver cuts its tail: two trials pending at once
then run in two threads instead of as one batch in one (with one slot, the whole run is one batch, as
before threads). A source that answered None is asked again only after `arrived` (a record reached the
caller, whose next pull it may now answer).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from runner.execute.base import WorkItem
from runner.execute.feed import Feed

if TYPE_CHECKING:
    from runner.execute.batching import Member

# A unit's items, and their batch members (runner.execute.batching) where batching is on
Unit = tuple[list[WorkItem], "list[Member | None] | None"]


class Units:
    def __init__(self, feed: Feed, batch: bool, max_batch: int) -> None:
        self.feed, self.batch, self.max_batch = feed, batch, max(1, max_batch)
        self._members: dict[int, Member | None] = {}  # id of a held item -> its batch member
        self._tasks: dict[str, Any] = {}  # task name -> the task (or the error loading it)
        self._ask = True  # the source may have something new: pull it even if it last answered None

    def arrived(self) -> None:
        """A record reached the caller: a source that waits for runs may have more now."""
        self._ask = True

    def next(self, slots: int) -> Unit | None:
        """The next unit, or None when nothing is held and the source has nothing for now (`feed.done`:
        it ended; `feed.waiting`: it waits for runs)."""
        while True:
            whole = self._complete()
            if whole is not None:
                return self._take(whole)
            if self.feed.exhausted or (self.feed.waiting and not self._ask):
                run = self._run()
                return self._take(min(run, math.ceil(run / max(1, slots)))) if run else None
            self._ask = False
            self.feed.pull(self.feed.held + 1)

    def _key(self, item: WorkItem) -> tuple[str, Hashable] | None:
        if not self.batch:
            return None
        if id(item) not in self._members:
            from runner.execute.batching import batch_member  # imports the tasks (torch): worker side

            self._members[id(item)] = batch_member(item, self._tasks)
        member = self._members[id(item)]
        return None if member is None else (item.task, member[1])

    def _run(self) -> int:
        """How many held items at the front run as one: a run of equal keys (up to a batch), else 1."""
        items = self.feed.peek()
        first = next(items, None)
        if first is None:
            return 0
        key = self._key(first)
        n = 1
        if key is not None:
            for item in items:
                if n >= self.max_batch or self._key(item) != key:
                    break
                n += 1
        return n

    def _complete(self) -> int | None:
        """The size of the unit at the front if nothing the source may still give could join it."""
        run = self._run()
        if run == 0:
            return None
        if run >= self.max_batch or run < self.feed.held or self._key(next(self.feed.peek())) is None:
            return run
        return None

    def _take(self, n: int) -> Unit:
        items = self.feed.take(n)  # whole groups only: a source's group is never split
        if not self.batch:
            return items, None
        for item in items:
            self._key(item)  # a source's group may hold items past the run that was keyed
        return items, [self._members.pop(id(item)) for item in items]
