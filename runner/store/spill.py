"""Rows keyed by 64-bit run keys, gathered by key range, so that two large sets of runs are matched in
bounded memory: a partitioned (Grace) hash join, as a database spills a join that does not fit.

Up to `limit` rows (CONVGRID_SPILL_ROWS, default 262,144) a KeySpill holds its rows in memory, and the
match is one sort and search, as it always was. Past the limit, every row goes to one of PARTITIONS temp
files by the top bits of its key; run keys are hash prefixes, so the ranges fill evenly, and matching
range by range holds 1/64 of each side at a time: planning a million-cell grid against a store of a
million runs holds ~16,000 rows of each, where the whole of both was ~50 MB. Within a range the rows keep
the order they were added in (so a "first read wins" rule between equal rows sees the read order).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import numpy as np
from numpy.typing import DTypeLike

from runner.settings import settings

PARTITIONS = 64
_SHIFT = np.uint64(64 - 6)  # a key's range: its top 6 bits (PARTITIONS = 2**6)


def spill_rows() -> int:
    return settings().spill_rows


def key_range(keys: np.ndarray) -> np.ndarray:
    """The partition of each key: ranges of equal width, in key order."""
    return (keys >> _SHIFT).astype(np.intp)


class KeySpill:
    """Rows of a uint64 `key` and the named fixed-width `columns`, as numpy structured arrays. Use as a
    context manager: the temp files, if any, are removed on exit."""

    def __init__(self, columns: Mapping[str, DTypeLike], limit: int | None = None) -> None:
        self.dtype = np.dtype([("key", "<u8"), *((name, np.dtype(t)) for name, t in columns.items())])
        self.limit = spill_rows() if limit is None else limit
        self.rows = 0
        self._held: list[np.ndarray] = []
        self._folder: tempfile.TemporaryDirectory[str] | None = None
        self._files: list[BinaryIO] = []

    @property
    def spilled(self) -> bool:
        return self._folder is not None

    def add(self, keys: np.ndarray, **columns: np.ndarray) -> None:
        rows = np.empty(len(keys), dtype=self.dtype)
        rows["key"] = keys
        for name, values in columns.items():
            rows[name] = values
        self.rows += len(rows)
        if self._folder is not None:
            self._write(rows)
            return
        self._held.append(rows)
        if self.rows > self.limit:
            self._spill()

    def _spill(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="convgrid-spill-")
        folder = Path(self._folder.name)
        self._files = [(folder / f"{p:02d}.rows").open("w+b") for p in range(PARTITIONS)]
        held, self._held = self._held, []
        while held:
            self._write(held.pop(0))

    def _write(self, rows: np.ndarray) -> None:
        ranges = key_range(rows["key"])
        order = np.argsort(ranges, kind="stable")  # stable: each range keeps the rows' order
        bounds = np.searchsorted(ranges[order], np.arange(PARTITIONS + 1))
        rows = rows[order]
        for p in np.flatnonzero(np.diff(bounds)).tolist():
            self._files[p].write(rows[bounds[p] : bounds[p + 1]].tobytes())

    def held_keys(self) -> np.ndarray | None:
        """Every row's key, sorted, while the rows are held in memory; None once spilled. A small side
        of a match: the other side need keep only the rows with these keys (runner.store.index)."""
        return None if self.spilled else np.sort(self._all_held()["key"])

    def _all_held(self) -> np.ndarray:
        if len(self._held) != 1:
            self._held = [np.concatenate([np.empty(0, dtype=self.dtype), *self._held])]
        return self._held[0]

    def partition(self, p: int, of: int) -> np.ndarray:
        """The rows of range `p` of `of` (1: every row; else PARTITIONS), in the order added."""
        if of == 1:
            if self.spilled:
                raise ValueError("a spilled KeySpill is read by range")
            return self._all_held()
        if not self.spilled:
            rows = self._all_held()
            return rows[key_range(rows["key"]) == p]
        file = self._files[p]
        file.flush()
        file.seek(0)
        return np.frombuffer(file.read(), dtype=self.dtype)

    def close(self) -> None:
        for file in self._files:
            file.close()
        self._files, self._held = [], []
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def __enter__(self) -> KeySpill:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def matched(*spills: KeySpill) -> Iterator[tuple[np.ndarray, ...]]:
    """The spills' rows range by range, the same range of each at once: one range of every row when
    none has spilled, else PARTITIONS ranges in key order."""
    count = PARTITIONS if any(s.spilled for s in spills) else 1
    for p in range(count):
        yield tuple(s.partition(p, count) for s in spills)
