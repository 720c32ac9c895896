"""64-bit keys of run ids: the first 16 hex digits of an id as an unsigned integer.

Sorted arrays of keys are how the driver holds sets of runs (the settled index, the claims' grid key,
a grid's distinct cells): 8 bytes a run and membership by one vectorised search, where a Python string
and set slot cost ~150 bytes. Two different run ids share a key with probability about n^2 / 2^65
(3e-8 for a million runs). A leaf module: the claims, the settled index and the store's flush index
(`PartKeys`, the run ids of one runs part) use it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

_HEX = np.full(256, 255, dtype=np.uint8)  # a hex digit's value; 255: not a lower-case hex digit
_HEX[np.frombuffer(b"0123456789abcdef", dtype=np.uint8)] = np.arange(16, dtype=np.uint8)
KEY_ROWS = 65_536  # ids keyed at a time: their 16 digits as bytes are 1 MB, whatever the number of ids


def run_keys(ids: np.ndarray) -> np.ndarray:
    """uint64 keys of run ids given as a numpy bytes array (dtype S32, lower-case hex): the first 16
    digits, two to a byte, read as one big-endian integer."""
    digits = np.ascontiguousarray(ids, dtype="S32").view(np.uint8).reshape(len(ids), 32)
    keys = np.empty(len(ids), dtype=np.uint64)
    for start in range(0, len(ids), KEY_ROWS):
        nibbles = _HEX[digits[start : start + KEY_ROWS, :16]]
        if (nibbles == 255).any():
            raise ValueError("run ids must be lower-case hexadecimal")
        keys[start : start + KEY_ROWS] = ((nibbles[:, 0::2] << 4) | nibbles[:, 1::2]).view(">u8").ravel()
    return keys


RUN_ID = "^[0-9a-f]{32}$"


def stored_keys(ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Keys of run ids read from the store. An id that is not 32 lower-case hex digits (a store written
    by hand or by an old convgrid) is no cell of any grid, and is left out rather than mis-keyed.
    The ids are read from the Arrow buffers chunk by chunk, never as Python strings (a million of
    those were ~90 MB)."""
    chunks = ids.chunks if isinstance(ids, pa.ChunkedArray) else [ids]
    keys = [np.empty(0, dtype=np.uint64)]
    for chunk in chunks:
        chunk = chunk.cast(pa.string())
        valid = pc.fill_null(pc.match_substring_regex(chunk, RUN_ID), False)
        if not pc.all(valid).as_py():
            chunk = chunk.filter(valid)
        keys.append(run_keys(fixed_width(chunk)))
    return np.concatenate(keys)


def any_keys(ids: pa.Array) -> np.ndarray:
    """Keys of every id in `ids`, one per row: a run id's as `run_keys`, any other string's (a legacy
    or hand-written store's) the first 8 bytes of its sha256. Such a key collides with a run id's with
    probability 2^-64 a pair; `status` counts with them, where leaving rows out would miscount."""
    ids = ids.cast(pa.string())
    valid = pc.fill_null(pc.match_substring_regex(ids, RUN_ID), False)
    if pc.all(valid).as_py():
        return run_keys(fixed_width(ids))
    keys = np.empty(len(ids), dtype=np.uint64)
    mask = valid.to_numpy(zero_copy_only=False)
    keys[mask] = run_keys(fixed_width(ids.filter(valid)))
    odd = [hashlib.sha256(str(i).encode()).digest()[:8] for i in ids.filter(pc.invert(valid)).to_pylist()]
    keys[~mask] = np.frombuffer(b"".join(odd), dtype=">u8").astype(np.uint64)
    return keys


def fixed_width(chunk: pa.Array) -> np.ndarray:
    """A string array whose values are all 32 bytes, as a numpy S32 view of its data buffer (no copy):
    such values lie back to back, from the first one's offset on."""
    if len(chunk) == 0:
        return np.empty(0, dtype="S32")
    offsets, data = chunk.buffers()[1], chunk.buffers()[2]
    first = int(np.frombuffer(offsets, dtype=np.int32, count=1, offset=4 * chunk.offset)[0])
    return np.frombuffer(data, dtype="S32", count=len(chunk), offset=first)


def id_array(ids: Iterable[str]) -> np.ndarray:
    return np.array([i.encode() for i in ids], dtype="S32")


READ_ROWS = 65_536  # rows decoded at a time: a part of a million runs is never one table in memory


def part_batches(
    fs: pafs.FileSystem, path: str, wanted: Sequence[str], rows: int | None = None
) -> Iterator[pa.RecordBatch]:
    """The rows of one part file, `rows` (default READ_ROWS) at a time, with those of the `wanted`
    columns it has: pages decoded as they are read (no pre-buffering), their checksums verified as
    every reader does."""
    reader = pq.ParquetFile(
        fs.open_input_file(path), pre_buffer=False, buffer_size=1 << 20, page_checksum_verification=True
    )
    columns = [c for c in wanted if c in reader.schema_arrow.names]
    return reader.iter_batches(batch_size=rows or READ_ROWS, columns=columns, use_threads=False)


@dataclass(frozen=True)
class PartKeys:
    """The run ids of a runs part: sorted 64-bit keys of the 32-hex ones (runner.store.index_keys),
    and, as strings, any others (a legacy or hand-written store's)."""

    keys: np.ndarray
    others: frozenset[str]

    @classmethod
    def of(cls, ids: pa.Array | pa.ChunkedArray) -> PartKeys:
        odd = pc.invert(pc.fill_null(pc.match_substring_regex(ids, RUN_ID), False))
        others = frozenset(ids.filter(odd).to_pylist()) if pc.any(odd).as_py() else frozenset()
        return cls(np.sort(stored_keys(ids)), others)

    @classmethod
    def join(cls, pieces: Sequence[PartKeys]) -> PartKeys:
        keys = np.sort(np.concatenate([np.empty(0, dtype=np.uint64), *(p.keys for p in pieces)]))
        return cls(keys, frozenset().union(*(p.others for p in pieces)))

    def meets(self, other: PartKeys) -> bool:
        """Whether the two share a run id (or, rarely, only a key: the caller's read filters by id)."""
        if self.others & other.others:
            return True
        if not len(self.keys) or not len(other.keys):
            return False
        at = np.searchsorted(self.keys, other.keys).clip(max=len(self.keys) - 1)
        return bool((self.keys[at] == other.keys).any())
