"""A compact index of the runs a store has settled, for planning a grid without holding its cells.

A run is keyed by the first 16 hex digits of its id as an unsigned 64-bit integer
(runner.store.index_keys): a sorted array of them is 8 bytes per run, and membership for a whole grid
is one vectorised search (numpy), so a re-submitted million-cell grid is answered without a Python
object per stored run. Where two ids shared a key (about n^2 / 2^65), the younger cell would be taken
for done.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.store.index_keys import id_array, run_keys, stored_keys
from runner.store.store import ResultStore
from tasks.status import FINAL_STATUSES, is_settled

__all__ = ["SettledIndex", "id_array", "run_keys", "stored_keys"]


@dataclass(frozen=True)
class SettledIndex:
    """Sorted keys of the runs not to run again: `final` (ok, diverged) and `skipped` (failed or timed
    out, settled unless retry_failed); see tasks.status.is_settled."""

    final: np.ndarray
    skipped: np.ndarray

    @classmethod
    def read(cls, store: ResultStore, tasks: Iterable[str], retry_failed: bool = False) -> SettledIndex:
        """Read the newest status of every run of the given tasks: two columns, nothing else."""
        final: list[np.ndarray] = []
        skipped: list[np.ndarray] = []
        for task in sorted(set(tasks)):
            table = store.read_runs(task, columns=["status"])
            if table.num_rows == 0:
                continue
            statuses = [s for s in pc.unique(table["status"]).to_pylist() if s is not None]
            for wanted, out in (
                ([s for s in statuses if s in FINAL_STATUSES], final),
                ([s for s in statuses if s not in FINAL_STATUSES and is_settled(s, retry_failed)], skipped),
            ):
                if wanted:
                    ids = table.filter(pc.is_in(table["status"], value_set=pa.array(wanted)))["run_id"]
                    out.append(stored_keys(ids))
        return cls(_sorted(final), _sorted(skipped))

    def classify(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(is final, is skipped) masks for the given keys."""
        return _member(keys, self.final), _member(keys, self.skipped)


def _sorted(parts: list[np.ndarray]) -> np.ndarray:
    return np.sort(np.concatenate(parts)) if parts else np.empty(0, dtype=np.uint64)


def _member(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    if len(sorted_keys) == 0:
        return np.zeros(len(keys), dtype=bool)
    at = np.searchsorted(sorted_keys, keys).clip(max=len(sorted_keys) - 1)
    return np.asarray(sorted_keys[at] == keys)
