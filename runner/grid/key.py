"""A grid's key: the hash of its sorted distinct run ids, so that every driver of one grid (in any
order, expanded on any machine) names it alike, e.g. in the claims by which drivers share it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

from runner.store.index_keys import run_keys
from runner.store.spill import KeySpill, matched

KEY_CHUNK = 65_536  # ids hashed this many at a time: one chunk's bytes, never the grid's, in memory


def grid_key_of(chunks: Iterable[np.ndarray]) -> str:
    """The hash of the ids in `chunks` (S32 arrays, any order), sorted, distinct and joined by newlines:
    the ids are gathered by key range (runner.store.spill) and each range sorted in turn, ranges in key
    order (a key is an id's first 16 hex digits, so key order is the ids' order), with no Python string
    per id; a million-cell grid's key holds about 1/64 of its ids at once."""
    digest = hashlib.sha256()
    first = True
    with KeySpill({"id": "S32"}) as spill:
        for chunk in chunks:
            chunk = np.ascontiguousarray(chunk, dtype="S32")
            spill.add(run_keys(chunk), id=chunk)
        for (rows,) in matched(spill):
            ids = np.unique(rows["id"])
            for start in range(0, len(ids), KEY_CHUNK):
                part = ids[start : start + KEY_CHUNK]
                lines = np.full((len(part), 33), ord("\n"), dtype=np.uint8)  # a newline before each id
                lines[:, 1:] = part.view(np.uint8).reshape(len(part), 32)
                data = lines.tobytes()
                digest.update(data[1:] if first else data)  # none before the first
                first = False
    return digest.hexdigest()[:16]
