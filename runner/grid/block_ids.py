"""Where a block's run ids live while its grid is planned and run: in the block's cache entry on disk
(runner.grid.cache), read a chunk at a time, so the driver holds no array of the grid's ids (32 bytes
a cell, 32 MB for a million cells, and as much again for each copy a step made); in memory only where
there is no cache (CONVGRID_CACHE=off, or its folder cannot be written).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from runner.grid import cache
from runner.grid.product_ids import CHUNK, product_id_chunks

if TYPE_CHECKING:
    from runner.grid.blocks import Block

IdChunks = Callable[[], Iterator[np.ndarray]]  # a block's ids computed afresh (every cell validated), in chunks


class FastPathMisread(Exception):
    """The fast path's id of a block's first or last cell is not the per-cell path's: the block's ids
    are computed again, cell by cell (its `IdChunks` takes the per-cell path from then on)."""


@dataclass(eq=False)
class BlockIds:
    size: int
    compute: IdChunks
    path: Path | None = None  # the cache entry the ids are read from (None: they are `held`)
    offset: int = 0  # where the ids start in it
    held: np.ndarray | None = None

    @classmethod
    def of(cls, path: Path | None, size: int, compute: IdChunks) -> BlockIds:
        """The ids from the block's entry `path` if it holds them, else computed into it (or into memory)."""
        offset = cache.entry_offset(path, size)
        if offset is not None:
            return cls(size, compute, path, offset)
        try:
            return cls._made(path, size, compute)
        except FastPathMisread:
            return cls._made(path, size, compute)

    @classmethod
    def _made(cls, path: Path | None, size: int, compute: IdChunks) -> BlockIds:
        offset = None if path is None else cache.write_ids(path, size, compute())
        if offset is None:  # no cache, or it could not be written: computed (again) into memory
            return cls(size, compute, held=_all(compute))
        return cls(size, compute, path, offset)

    def read(self, start: int, stop: int) -> np.ndarray:
        """Ids `start:stop` of the block."""
        if self.held is None and self.path is not None:
            ids = cache.read_ids(self.path, self.offset, start, stop)
            if ids is not None:
                return ids
            self.held = _all(self.compute)  # the entry was removed or cut meanwhile: compute and hold them
        assert self.held is not None
        return self.held[start:stop]


def _all(compute: IdChunks) -> np.ndarray:
    try:
        chunks = list(compute())
    except FastPathMisread:
        chunks = list(compute())
    return np.concatenate([np.empty(0, dtype="S32"), *chunks])


def block_ids(block: Block) -> BlockIds:
    """The block's run ids: in its entry of the cache of validated blocks, computed into it if absent."""
    path = cache.entry(block.task, block.spec.model_dump())  # python values: NaN is refused, not nulled
    return BlockIds.of(path, block.size, BlockIdChunks(block))


class BlockIdChunks:
    """A block's ids, computed: by the fast path of product blocks (runner.grid.product_ids) where it
    applies, its first and last cells cross-checked against the per-cell path (a guard against a
    pydantic whose schemas the fast path misreads: then FastPathMisread, and per cell from then on);
    per cell otherwise, every invalid cell refused with its key as always."""

    def __init__(self, block: Block) -> None:
        self.block = block
        self.fast = True

    def __call__(self) -> Iterator[np.ndarray]:
        block = self.block
        chunks = product_id_chunks(block.task, block.spec.params, block.all_axes) if self.fast else None
        return per_cell_chunks(block) if chunks is None else self._checked(chunks)

    def _checked(self, chunks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        block, last = self.block, np.empty(0, dtype="S32")
        ends = {p: block.cell(block.raw_at(p)).run_id.encode() for p in {0, block.size - 1}}
        for i, chunk in enumerate(chunks):
            if i == 0 and chunk[0] != ends[0]:
                self._misread()
            yield chunk
            last = chunk
        if not len(last) or last[-1] != ends[block.size - 1]:
            self._misread()

    def _misread(self) -> None:
        self.fast = False
        raise FastPathMisread(f"block {self.block.index} of {self.block.file}")


def per_cell_chunks(block: Block) -> Iterator[np.ndarray]:
    pending: list[bytes] = []
    for raw in block.raws():
        pending.append(block.cell(raw).run_id.encode())
        if len(pending) == CHUNK:
            yield np.array(pending, dtype="S32")
            pending.clear()
    if pending:
        yield np.array(pending, dtype="S32")


def per_cell_ids(block: Block) -> np.ndarray:
    return np.concatenate([np.empty(0, dtype="S32"), *per_cell_chunks(block)])
