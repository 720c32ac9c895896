"""A compact index of the runs a store has settled, for planning a grid without holding its cells.

A run is keyed by the first 16 hex digits of its id as an unsigned 64-bit integer
(runner.store.index_keys): a sorted array of them is 8 bytes per run, and membership for a whole grid
is one vectorised search (numpy), so a re-submitted million-cell grid is answered without a Python
object per stored run. Where two ids shared a key (about n^2 / 2^65), the younger cell would be taken
for done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.store.index_keys import RUN_ID, any_keys, fixed_width, id_array, part_batches, run_keys, stored_keys
from runner.store.store import RUNS, ResultStore, task_dir
from tasks.status import FINAL_STATUSES, is_settled

__all__ = ["SettledIndex", "id_array", "run_keys", "stored_keys"]
T = TypeVar("T")


@dataclass(frozen=True)
class SettledIndex:
    """Sorted keys of the runs not to run again: `final` (ok, diverged) and `skipped` (failed or timed
    out, settled unless retry_failed); see tasks.status.is_settled."""

    final: np.ndarray
    skipped: np.ndarray

    @classmethod
    def read(cls, store: ResultStore, tasks: Iterable[str], retry_failed: bool = False) -> SettledIndex:
        """Read the newest status of every run of the given tasks (see `newest_statuses`)."""
        final: list[np.ndarray] = []
        skipped: list[np.ndarray] = []
        for task in sorted(set(tasks)):
            keys, codes, names = store.retrying(partial(newest_statuses, store, task))
            for settled, out in (
                ([s in FINAL_STATUSES for s in names], final),
                ([s not in FINAL_STATUSES and is_settled(s, retry_failed) for s in names], skipped),
            ):
                out.append(keys[np.array(settled + [False], dtype=bool)[codes]])  # code -1 (a null status): no
        return cls(_sorted(final), _sorted(skipped))

    def classify(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(is final, is skipped) masks for the given keys."""
        return _member(keys, self.final), _member(keys, self.skipped)


def _sorted(parts: list[np.ndarray]) -> np.ndarray:
    """One sorted array of the parts, each sorted already (one task's: no copy)."""
    if len(parts) == 1:
        return parts[0]
    return np.sort(np.concatenate(parts)) if parts else np.empty(0, dtype=np.uint64)


def _member(keys: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    if len(sorted_keys) == 0:
        return np.zeros(len(keys), dtype=bool)
    at = np.searchsorted(sorted_keys, keys).clip(max=len(sorted_keys) - 1)
    return np.asarray(sorted_keys[at] == keys)


@dataclass(frozen=True)
class NewestRows:
    """The newest row of every stored run of a task: keys (sorted), when it finished (float
    microseconds, a null as -inf), and its status as a code into `names` (-1: a null status)."""

    keys: np.ndarray
    finished: np.ndarray
    codes: np.ndarray
    names: list[str]


def newest_rows(store: ResultStore, task: str, every_id: bool = False) -> NewestRows:
    """The newest row (by `finished`, a null one oldest; equal ones: the first read, as
    `latest_per_run` keeps) of every stored run of `task`. The runs parts are read in batches of
    READ_ROWS rows, three columns, each batch turned at once into 18 bytes a row (key, finished,
    status code): read as one table (`read_runs`), a million runs cost ~180 MB more. A part that fails
    to read is marked damaged and left out (`per_part`). Rows whose id is not a run id (a legacy
    store's) are left out, unless `every_id` (then keyed by `index_keys.any_keys`)."""
    names: list[str] = []
    keys: list[np.ndarray] = [np.empty(0, dtype=np.uint64)]
    finished: list[np.ndarray] = [np.empty(0, dtype=np.float64)]
    codes: list[np.ndarray] = [np.empty(0, dtype=np.int16)]
    columns = ["run_id", "status", "finished"]
    convert = partial(_status_rows, names=names, every_id=every_id)
    for rows in per_part(store, store.parts(task_dir(RUNS, task)), columns, convert):
        for k, f, c in rows:
            keys.append(k)
            finished.append(f)
            codes.append(c)
    key, when, code = np.concatenate(keys), np.concatenate(finished), np.concatenate(codes)
    del keys, finished, codes
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    if (ordered[1:] == ordered[:-1]).any():  # runs stored more than once (retries): the newest first
        order = np.lexsort((np.arange(len(key)), -when, key))  # by key, newest first, then in read order
        ordered = key[order]
    key, when, code = ordered, when[order], code[order]
    del order, ordered
    first = np.ones(len(key), dtype=bool)
    first[1:] = key[1:] != key[:-1]
    if first.all():
        return NewestRows(key, when, code, names)
    return NewestRows(key[first], when[first], code[first], names)


def newest_statuses(store: ResultStore, task: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(keys, status codes, status names) of the newest row of every stored run of `task` whose id is a
    run id (`newest_rows`), keys sorted."""
    newest = newest_rows(store, task)
    return newest.keys, newest.codes, newest.names


def per_part(
    store: ResultStore, parts: Sequence[str], wanted: Sequence[str], convert: Callable[[pa.RecordBatch], T]
) -> Iterator[list[T]]:
    """`convert` of each batch of each readable part, a list per part: a part that fails to read midway
    is marked damaged and left out whole, as every reader does, and only the converted (compact) form
    of a part is held until it is read to its end. A FileNotFoundError (a transaction replaced the
    part) is the caller's to retry."""
    for part in store.reader.readable(parts):
        try:
            yield [convert(batch) for batch in part_batches(store.fs, store.files.abs(part), wanted)]
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as exc:
            store.reader.mark_damaged(part, exc)


def member_keys(store: ResultStore, grid: str) -> np.ndarray:
    """Sorted keys of the run ids members/ links to `grid`, read in batches (two columns)."""

    def keys_of(batch: pa.RecordBatch) -> np.ndarray:
        return stored_keys(batch.filter(pc.equal(batch.column("grid"), grid)).column("run_id"))

    parts = per_part(store, store.parts("members"), ["grid", "run_id"], keys_of)
    return np.sort(np.concatenate([np.empty(0, dtype=np.uint64), *(k for part in parts for k in part)]))


def _status_rows(
    batch: pa.RecordBatch, names: list[str], every_id: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keys, finished as float microseconds with nulls as -inf, status codes into `names`, which grows)
    of a batch of a runs part; rows whose id is not a run id (a legacy store's) are left out, unless
    `every_id`."""
    if not every_id:
        batch = batch.filter(pc.fill_null(pc.match_substring_regex(batch.column("run_id"), RUN_ID), False))
    if "finished" in batch.schema.names:
        micros = pc.cast(pc.cast(batch.column("finished"), pa.timestamp("us", "UTC")), pa.int64())
        when = pc.fill_null(pc.cast(micros, pa.float64()), -np.inf).to_numpy()
    else:
        when = np.full(batch.num_rows, -np.inf)
    status = batch.column("status").dictionary_encode()
    for name in status.dictionary.to_pylist():
        if name not in names:
            names.append(name)
    lookup = np.array([names.index(n) for n in status.dictionary.to_pylist()] + [-1], dtype=np.int16)
    indices = pc.fill_null(status.indices, -1).to_numpy(zero_copy_only=False)
    ids = batch.column("run_id")
    keys = any_keys(ids) if every_id else run_keys(fixed_width(ids))
    return keys, np.asarray(when, dtype=np.float64), lookup[indices]
