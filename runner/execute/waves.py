"""The cells of a grid shared by several drivers, as one lazy source for one `execute` call.

A driver claims blocks of the grid in waves (runner.coord.claims) only as its executor asks for more
work, so the whole of its share runs as one `execute` call: the executor's chunks and batches
(tasks.base.BatchableTask) span waves, and its workers never drain between them. Before, each wave was
an `execute` call of its own: a 64-cell grid ran as six batches, not one.

A block is reported finished (and so may be taken over, or counted done, by other drivers) only once
every record of it is committed: the store then answers for each of its cells. When every block left
is held by live drivers, this source first settles its own work (flushes and waits for the commit, so
its finished blocks are visible: two drivers never wait on each other's unflushed records); then, if
runs of its own are still out, it answers None ("nothing yet", the executor runs or collects them and
asks again), else it waits a poll and looks again. It also settles before it claims each wave after
the first, so what a killed driver leaves uncommitted is bounded by what it pulled since.

A driver that was paused (SIGSTOP, a suspended laptop) past half its lease may have had its blocks
taken over and run by another; its heartbeat notices the lapse (runner.coord.liveness.Heartbeat), and
before it hands out one more cell it asks whether each block is still its own and which of its cells
the store still lacks (before, a driver resumed after the grid was done ran 572 of 600 cells again).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from runner.coord.claims import Blocks, Claims
from runner.grid.cells import Cell, CellSource
from runner.store.records import RunRecord

LAPSE_CHECK_CELLS = 256  # cells built at a time; a lapse is noticed before the next one is yielded


class WaveSource:
    """Iterate to claim and yield cells; `arrived` and `committed` are told of every record. `todo` are
    the positions (into `grid.ids`) of the cells to run; `still_todo(positions)` answers which of them
    the store does not hold yet; `settle()` commits every record that arrived. Per cell it keeps nothing
    until the cell is pulled, and only until its record is committed: a block is a count of its cells not
    yet committed."""

    def __init__(
        self,
        claims: Claims,
        grid: CellSource,
        todo: np.ndarray,
        still_todo: Callable[[np.ndarray], np.ndarray],
        settle: Callable[[], None],
    ) -> None:
        self.claims, self.grid, self.todo, self.still_todo = claims, grid, todo, still_todo
        self.settle = settle  # flush what arrived and wait until it is committed
        self.blocks = Blocks.of(len(grid))
        self._lock = threading.Lock()  # `committed` runs in the commit thread
        self._uncommitted: dict[int, int] = {}  # block -> how many of its claimed cells are not committed
        self._block_of: dict[str, int] = {}  # run id -> block, of the cells yielded and not yet committed
        self._out = 0  # yielded, record not yet arrived
        self._claimed = 0  # waves claimed so far
        self.rechecked = 0  # blocks checked again after a lapse of the heartbeat

    def __iter__(self) -> Iterator[Cell | None]:
        for wave in self.claims.waves(self.blocks, self.todo, self.still_todo):
            if wave is None:
                self.settle()
                if self._out > 0:
                    yield None  # our own runs are still out: let the executor run or collect them
                else:
                    time.sleep(self.claims.poll_s)
                continue
            if self._claimed:
                # the records that arrived so far are committed before more work is taken: a driver killed
                # now leaves uncommitted only what it pulled since (with the in-process executor, the wave
                # it is running), and its finished blocks are visible to the others at once
                self.settle()
            self._claimed += 1
            with self._lock:
                for block, positions in wave:
                    self._uncommitted[block] = len(positions)
            for block, positions in wave:
                yield from self._cells_of(block, positions)

    def _cells_of(self, block: int, positions: np.ndarray) -> Iterator[Cell]:
        """The cells at `positions` of a claimed block, built a chunk at a time; after a lapse of this
        driver's heartbeat (it was paused, and another driver may have taken the block over and run it)
        only the cells the store still lacks, and none once the block is no longer this driver's."""
        if self.claims.plan_stale:  # a lapse before this block began: check it first
            positions = self._recheck(block, positions)
        start = 0
        while start < len(positions):
            chunk = positions[start : start + LAPSE_CHECK_CELLS]
            for offset, cell in enumerate(self.grid.cells_at(chunk)):
                if self.claims.lapsed():
                    positions = self._recheck(block, positions[start + offset :])
                    start = 0
                    break
                with self._lock:
                    self._block_of[cell.run_id] = block
                self._out += 1
                yield cell
            else:
                start += len(chunk)

    def _recheck(self, block: int, left: np.ndarray) -> np.ndarray:
        """What is left to run of `block` after a lapse: nothing if another driver holds it now, else the
        cells of `left` the store does not hold (what was run meanwhile, by anyone, is not run again)."""
        self.settle()  # this driver's own finished runs first, so the store answers for them
        keep = self.still_todo(left) if self.claims.holds(block) else left[:0]
        dropped = len(left) - len(keep)
        with self._lock:
            self._uncommitted[block] -= dropped
            done = self._uncommitted[block] == 0
            if done:
                del self._uncommitted[block]
        self.rechecked += 1
        if done:
            self.claims.finished([block])
        return keep

    def arrived(self, records: Sequence[RunRecord]) -> None:
        self._out -= len(records)

    def committed(self, records: Sequence[RunRecord]) -> None:
        finished = []
        with self._lock:
            for record in records:
                block = self._block_of.pop(record.run_id, None)
                if block is None:
                    continue
                self._uncommitted[block] -= 1
                if not self._uncommitted[block]:
                    del self._uncommitted[block]
                    finished.append(block)
        if finished:
            self.claims.finished(finished)
