"""The runs a store holds, matched against a grid's cells in bounded memory.

A run is keyed by the first 16 hex digits of its id as an unsigned 64-bit integer
(runner.store.index_keys). Planning a grid is a join of its cells with the store's runs on that key:
each side streams into a KeySpill (runner.store.spill), 16 and 20 bytes a row, and the two are matched
range of keys by range, so neither the grid nor the store is ever in memory whole once either passes
the spill limit (a re-submitted million-cell grid against a million stored runs holds ~1/64 of each).
Where two ids shared a key (about n^2 / 2^65), the younger cell would be taken for done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import DTypeLike

from runner.store.index_keys import RUN_ID, any_keys, fixed_width, id_array, part_batches, run_keys, stored_keys
from runner.store.layout import RUNS, task_dir
from runner.store.parts import ReadAgain
from runner.store.spill import KeySpill, matched
from runner.store.store import ResultStore
from tasks.status import FINAL_STATUSES, is_settled

__all__ = ["id_array", "run_keys", "stored_keys"]
T = TypeVar("T")

# a stored run's row in a spill, with its key: its commit order (commit_seq, then finished; -inf: null)
RUN_ROW = {"seq": np.float64, "finished": np.float64, "code": np.int16, "task": np.int16}
CELL_ROW = {"index": np.int64}  # a grid's cell in a spill: its key and index into the grid


def stream_parts(
    store: ResultStore, parts: Sequence[str], wanted: Sequence[str], convert: Callable[[pa.RecordBatch], T]
) -> Iterator[T]:
    """`convert` of each batch of each readable part, as read. A part that fails to read midway is
    marked damaged and ReadAgain raised: the caller's `store.retrying` starts over without it (the
    rows it gave are in the caller's hands, so only starting over leaves it out whole, as every
    reader does). A FileNotFoundError (a transaction replaced the part) is retried the same way."""
    for part in store.reader.readable(parts):
        try:
            for batch in part_batches(store.fs, store.files.abs(part), wanted):
                yield convert(batch)
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as exc:
            store.reader.mark_damaged(part, exc)
            raise ReadAgain(part) from exc


def spill_from(store: ResultStore, columns: Mapping[str, DTypeLike], fill: Callable[[KeySpill], None]) -> KeySpill:
    """A KeySpill of `columns` filled by `fill`, a fresh one each time the read starts over."""

    def attempt() -> KeySpill:
        spill = KeySpill(columns)
        try:
            fill(spill)
        except BaseException:
            spill.close()
            raise
        return spill

    return store.retrying(attempt)


def spill_runs(
    store: ResultStore,
    tasks: Iterable[str],
    names: list[str],
    every_id: bool = False,
    wanted: np.ndarray | None = None,
) -> KeySpill:
    """Every stored row of the runs of `tasks`: (key, commit_seq and finished as float microseconds with
    a null as -inf, status code into `names`, -1 for a null, the task's place in sorted `tasks`). Rows whose id
    is not a run id (a legacy store's) are left out, unless `every_id` (then keyed by
    `index_keys.any_keys`); with `wanted` (sorted keys), so are the rows of other runs: a small grid
    planned against a large store holds its own runs' rows, not the store's."""

    def fill(spill: KeySpill) -> None:
        names.clear()
        for number, task in enumerate(sorted(set(tasks))):
            parts = store.parts(task_dir(RUNS, task))
            columns = ["run_id", "status", "commit_seq", "finished"]
            for keys, seq, when, codes in stream_parts(store, parts, columns, convert):
                keep = slice(None) if wanted is None else lookup(wanted, keys)[1]
                number_ = np.full(len(keys), number)[keep]
                spill.add(keys[keep], seq=seq[keep], finished=when[keep], code=codes[keep], task=number_)

    def convert(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return _status_rows(batch, names, every_id)

    return spill_from(store, RUN_ROW, fill)


def newest_of(rows: np.ndarray) -> np.ndarray:
    """The newest row of each run of each task (spilled RUN_ROW rows in read order), sorted by key: in
    commit order (the largest commit_seq, then the latest `finished`; a null oldest), equal ones the
    first read, as the store's reader (`latest_per_run`) keeps. (A run id names its task, so only a
    legacy id is in two tasks.)"""
    keys = rows["key"]
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    if first.all():
        return rows[order]
    # runs stored more than once (retries): by key and task, the newest first, then in read order
    order = np.lexsort((np.arange(len(keys)), -rows["finished"], -rows["seq"], rows["task"], keys))
    ordered, tasks = keys[order], rows["task"][order]
    first[1:] = (ordered[1:] != ordered[:-1]) | (tasks[1:] != tasks[:-1])
    return rows[order[first]]


def lookup(sorted_keys: np.ndarray, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(where each of `keys` is in `sorted_keys`, whether it is there at all)."""
    if not len(sorted_keys):
        return np.zeros(len(keys), dtype=np.intp), np.zeros(len(keys), dtype=bool)
    at = np.searchsorted(sorted_keys, keys).clip(max=len(sorted_keys) - 1)
    return at, sorted_keys[at] == keys


def settled_cells(
    store: ResultStore, tasks: Iterable[str], cells: KeySpill, retry_failed: bool = False
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """For each range of keys: (the cells' rows, which are final, which are skipped): final, a run
    whose newest row is ok or diverged; skipped, failed or timed out unless `retry_failed` (see
    tasks.status.is_settled). `cells` holds CELL_ROW rows; the store's runs are streamed into a spill."""
    names: list[str] = []
    with spill_runs(store, tasks, names, wanted=cells.held_keys()) as runs:
        final = np.array([n in FINAL_STATUSES for n in names] + [False])  # code -1 (a null status): no
        skipped = np.array([n not in FINAL_STATUSES and is_settled(n, retry_failed) for n in names] + [False])
        for cell_rows, run_rows in matched(cells, runs):
            newest = newest_of(run_rows)
            at, found = lookup(newest["key"], cell_rows["key"])
            codes = np.where(found, newest["code"][at] if len(newest) else -1, -1)
            yield cell_rows, final[codes], skipped[codes]


def member_spill(store: ResultStore, grid: str, wanted: np.ndarray | None = None) -> KeySpill:
    """Keys of the run ids members/ links to `grid` (of those in `wanted`, sorted keys, if given), read
    in batches (two columns)."""

    def keys_of(batch: pa.RecordBatch) -> np.ndarray:
        keys = stored_keys(batch.filter(pc.equal(batch.column("grid"), grid)).column("run_id"))
        return keys if wanted is None else keys[lookup(wanted, keys)[1]]

    def fill(spill: KeySpill) -> None:
        for keys in stream_parts(store, store.parts("members"), ["grid", "run_id"], keys_of):
            spill.add(keys)

    return spill_from(store, {}, fill)


def order_values(batch: pa.RecordBatch | pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(commit_seq, finished as microseconds) of each row as floats, -inf where null or absent: the
    commit order (runner.store.tables.order_keys) as numbers."""
    out = []
    for name in ("commit_seq", "finished"):
        if name not in batch.schema.names:
            out.append(np.full(batch.num_rows, -np.inf))
            continue
        column = batch.column(name)
        if name == "finished":
            column = pc.cast(pc.cast(column, pa.timestamp("us", "UTC")), pa.int64())
        out.append(np.asarray(pc.fill_null(pc.cast(column, pa.float64()), -np.inf).to_numpy(zero_copy_only=False)))
    return out[0], out[1]


def _status_rows(
    batch: pa.RecordBatch, names: list[str], every_id: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(keys, commit order (`order_values`), status codes into `names`, which grows) of a batch of a
    runs part; rows whose id is not a run id (a legacy store's) are left out, unless `every_id`."""
    if not every_id:
        batch = batch.filter(pc.fill_null(pc.match_substring_regex(batch.column("run_id"), RUN_ID), False))
    seq, when = order_values(batch)
    status = batch.column("status").dictionary_encode()
    for name in status.dictionary.to_pylist():
        if name not in names:
            names.append(name)
    lookup = np.array([names.index(n) for n in status.dictionary.to_pylist()] + [-1], dtype=np.int16)
    indices = pc.fill_null(status.indices, -1).to_numpy(zero_copy_only=False)
    ids = batch.column("run_id")
    keys = any_keys(ids) if every_id else run_keys(fixed_width(ids))
    return keys, seq, when, lookup[indices]
