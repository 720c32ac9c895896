"""The cells a driver plans and runs from: an explicit list (`Grid`) or a validated grid file
(`GridFile`) whose cells are rebuilt from its blocks on demand and whose run ids are read a chunk at a
time from the cache of validated blocks (runner.grid.block_ids)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from pydantic import BaseModel

if TYPE_CHECKING:
    from runner.grid.block_ids import BlockIds
    from runner.grid.blocks import Block

ID_ROWS = 65_536  # ids read at a time (2 MB): what the driver holds of a grid's ids, whatever its size


@dataclass(frozen=True)
class Cell:
    """One run a grid asks for."""

    run_id: str
    task: str
    params: BaseModel
    block: int

    def params_json(self) -> dict[str, Any]:
        return self.params.model_dump(mode="json")


@dataclass(frozen=True)
class Grid:
    """An explicit list of cells (reruns from the store, a study's baselines): a CellSource in memory."""

    name: str
    source: str
    description: str
    cells: list[Cell]  # unique by run_id, in file order

    def tasks(self) -> list[str]:
        return sorted({c.task for c in self.cells})

    def __len__(self) -> int:
        return len(self.cells)

    @cached_property
    def ids(self) -> np.ndarray:
        return np.array([c.run_id.encode() for c in self.cells], dtype="S32")

    def id_chunks(self) -> Iterator[np.ndarray]:
        yield self.ids

    def ids_at(self, indices: np.ndarray) -> np.ndarray:
        return self.ids[np.asarray(indices, dtype=np.int64)]

    def cells_at(self, indices: Sequence[int] | np.ndarray) -> Iterator[Cell]:
        return (self.cells[i] for i in np.asarray(indices, dtype=np.int64).tolist())

    def task_and_block(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cells = [self.cells[i] for i in indices.tolist()]
        return np.array([c.task for c in cells], dtype=str), np.array([c.block for c in cells], dtype=np.int64)


class CellSource(Protocol):
    """What the driver plans and runs from: a grid file expanded on demand, or an explicit list of cells.
    Its distinct cells are indexed 0..len-1 in order."""

    @property
    def name(self) -> str: ...

    @property
    def source(self) -> str: ...

    @property
    def description(self) -> str: ...

    def __len__(self) -> int: ...

    def tasks(self) -> list[str]: ...

    def id_chunks(self) -> Iterator[np.ndarray]: ...  # every cell's run id (S32), in order, a chunk at a time

    def ids_at(self, indices: np.ndarray) -> np.ndarray: ...

    def cells_at(self, indices: Sequence[int] | np.ndarray) -> Iterator[Cell]: ...

    def task_and_block(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass(frozen=True, eq=False)
class GridFile:
    """A validated grid file: its blocks and where their run ids are (`BlockIds`, on disk in the cache
    of validated blocks), never the cells' params nor, past a cache, their ids. Its distinct cells are
    its blocks' cells one after another (positions), less those `dropped` (a run an earlier cell asks for)."""

    name: str
    source: str
    description: str
    blocks: list[Block]
    sources: list[BlockIds]
    dropped: np.ndarray = dataclasses.field(default_factory=lambda: np.empty(0, dtype=np.int64))
    checkpoint_every: float | None = None  # the file's cadence of checkpoints, if it sets one

    def __len__(self) -> int:
        return int(self._offsets[-1]) - len(self.dropped)

    @cached_property
    def _offsets(self) -> np.ndarray:
        return np.cumsum([0] + [b.size for b in self.blocks])

    @cached_property
    def _shifts(self) -> np.ndarray:
        return self.dropped - np.arange(len(self.dropped))

    def _blocks_of(self, positions: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._offsets, positions, side="right") - 1

    def positions_of(self, indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Each distinct cell's position among all the blocks' cells: its index plus the dropped before it."""
        indices = np.asarray(indices, dtype=np.int64)
        return indices + np.searchsorted(self._shifts, indices, side="right")

    def tasks(self) -> list[str]:
        return sorted({b.task.name for b in self.blocks if b.size})

    def id_chunks(self) -> Iterator[np.ndarray]:
        """Every distinct cell's run id in order, about ID_ROWS at a time, read from the blocks' entries."""
        rows = ID_ROWS
        pending: list[np.ndarray] = []
        count = 0
        for ids_of, offset in zip(self.sources, self._offsets[:-1].tolist(), strict=True):
            for start in range(0, ids_of.size, rows):
                stop = min(start + rows, ids_of.size)
                ids = ids_of.read(start, stop)
                lo, hi = np.searchsorted(self.dropped, [offset + start, offset + stop])
                if hi > lo:
                    ids = np.delete(ids, self.dropped[lo:hi] - offset - start)
                pending.append(ids)
                count += len(ids)
                if count >= rows:
                    yield _joined(pending)
                    pending, count = [], 0
        if pending:
            yield _joined(pending)

    def ids_at(self, indices: np.ndarray) -> np.ndarray:
        """The run ids of the cells at `indices`, read a chunk of each block at a time."""
        positions = self.positions_of(indices)
        order = np.argsort(positions, kind="stable")
        ranked = positions[order]
        out = np.empty(len(positions), dtype="S32")
        blocks = self._blocks_of(ranked)
        bounds = np.flatnonzero(np.diff(blocks)) + 1
        for lo, hi in zip([0, *bounds.tolist()], [*bounds.tolist(), len(ranked)], strict=True):
            if lo == hi:
                continue
            b = int(blocks[lo])
            local = ranked[lo:hi] - int(self._offsets[b])
            chunk = local // ID_ROWS
            cuts = np.flatnonzero(np.diff(chunk)) + 1
            for a, z in zip([0, *cuts.tolist()], [*cuts.tolist(), len(local)], strict=True):
                first = int(chunk[a]) * ID_ROWS
                ids = self.sources[b].read(first, min(first + ID_ROWS, self.sources[b].size))
                out[order[lo + a : lo + z]] = ids[local[a:z] - first]
        return out

    @property
    def ids(self) -> np.ndarray:
        """Every distinct cell's run id, read at once (32 bytes a cell): for small grids and tests; the
        driver streams `id_chunks`."""
        return np.concatenate([np.empty(0, dtype="S32"), *self.id_chunks()])

    def cells_at(self, indices: Sequence[int] | np.ndarray) -> Iterator[Cell]:
        """The cells at these indices, rebuilt from their positions and validated again."""
        positions = self.positions_of(indices)
        for position, b in zip(positions.tolist(), self._blocks_of(positions).tolist(), strict=True):
            block = self.blocks[b]
            yield block.cell(block.raw_at(position - int(self._offsets[b])))

    def task_and_block(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(task, block) of each cell at `indices`: what its members/ row says."""
        blocks = self._blocks_of(self.positions_of(indices))
        return np.array([b.task.name for b in self.blocks])[blocks], blocks

    @property
    def cells(self) -> list[Cell]:
        """Every cell, in memory: for small grids and tests; the driver streams through cells_at."""
        return list(self.cells_at(np.arange(len(self))))


def _joined(pieces: list[np.ndarray]) -> np.ndarray:
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
