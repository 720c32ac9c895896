"""Merging small part files with bounded memory: what the automatic compaction after a run does.

`convgrid compact` (runner.store.compact) reads each task's whole runs, attempts and curves to drop
superseded rows, so its memory grows with the store (100,000 runs: 923 MB). After a run there is
nothing to drop: every flush keeps runs/ and curves/ the current state. What slows reads down is the
number of parts, so this only merges parts: in each folder holding more than `max_parts` parts, the
small ones (by their footers' uncompressed size, no data read) are cut, in order, into groups of at
most `budget` bytes, and each group of two or more becomes one part holding the union of their rows.
Rows are streamed through (MERGE_ROWS at a time), one transaction per group under the writers' lock,
so the driver holds one batch, never a group or a folder, and a kill between groups (or inside one:
runner.store.txn) leaves a store every reader reads as before.

Why a union of parts changes nothing a reader sees:
  - runs/, attempts/: readers keep the newest row per run by `finished`; the rows are the same ones;
  - curves/, attempt_curves/: `kept_curves` needs each run's rows in one part in step order: whole
    parts are copied in order, so a run's rows stay together and in order, in the merged part;
  - members/: read whole and de-duplicated on (grid, run_id); trials/: the newest row per trial by
    `written` (`newest_trials`);
  - only ties (two rows of one key with the same timestamp) fall back to the order parts are read in,
    and the merged part, named afresh, reads after the parts left alone. Flushes that rewrite a part
    already move rows into new parts the same way.
The merged part has the folder's schema as the files say it (union of the parts' columns, the newest
part's metadata): it is the newest part afterwards, so the folder's schema reads the same.

Damaged parts are never merged: a part whose footer cannot be read is left where it is, and one that
fails midway aborts its group's part (deleted, nothing committed), is left in place and the group is
merged without it. `convgrid compact --repair` deals with them.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.store.files import write_parquet_tables
from runner.store.index_keys import part_batches
from runner.store.layout import LOGS, TASK_KINDS, task_dir
from runner.store.parts import DamagedPartWarning
from runner.store.store import ResultStore
from runner.store.tables import conform
from runner.store.txn import Transaction

MERGE_BUDGET = 64 * 1024 * 1024  # uncompressed bytes of one merged part; a part over half of it is left
# Rows decoded at a time. Runs rows hold long strings (params, packages, tracebacks) that Parquet keeps
# dictionary-encoded and Arrow does not: a few KB a row in memory, so fewer rows than the index reads.
MERGE_ROWS = 8_192
ROW_GROUP_ROWS = 65_536  # rows per row group written: merging 256-row parts does not keep their row groups
ROW_GROUP_BYTES = 16 * 1024 * 1024  # or fewer, where rows are wide: the most held before a write


@dataclass
class MergeReport:
    parts_in: int = 0  # parts replaced by merged ones
    parts_out: int = 0  # merged parts written
    damaged: list[str] = field(default_factory=list)  # parts left in place because they cannot be read

    def line(self) -> str:
        text = f"merged {self.parts_in} part files into {self.parts_out}"
        if self.damaged:
            text += f"; left {len(self.damaged)} damaged parts in place (`convgrid compact --repair` moves them)"
        return text


def folders(store: ResultStore) -> list[str]:
    """Every folder of part files: each task's runs, curves, attempts and attempt_curves; members; trials;
    logs (an attempt's row, read whole by run id: a union changes nothing)."""
    return [*(task_dir(kind, task) for task in store.tasks() for kind in TASK_KINDS), "members", "trials", LOGS]


def fragmented(store: ResultStore, max_parts: int) -> list[str]:
    """The folders holding more than `max_parts` parts."""
    return [folder for folder in folders(store) if len(store.parts(folder)) > max_parts]


def merge_parts(store: ResultStore, max_parts: int, budget: int = MERGE_BUDGET) -> MergeReport:
    """Merge the small parts of every folder holding more than `max_parts` parts (see the module)."""
    report = MergeReport()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedPartWarning)  # the report counts them
        for folder in fragmented(store, max_parts):
            _merge_folder(store, folder, max_parts, budget, report)
    return report


def plan_groups(sizes: Sequence[tuple[str, int]], budget: int) -> list[list[str]]:
    """The parts to merge, in groups: the parts of at most budget/2 bytes, in order, cut into groups of
    at most `budget` bytes; groups of one part are left alone."""
    groups: list[list[str]] = [[]]
    total = 0
    for part, size in sizes:
        if size > budget // 2:
            continue  # large already: merging it would rewrite many bytes to save one file
        if groups[-1] and total + size > budget:
            groups.append([])
            total = 0
        groups[-1].append(part)
        total += size
    return [group for group in groups if len(group) >= 2]


def _merge_folder(store: ResultStore, folder: str, max_parts: int, budget: int, report: MergeReport) -> None:
    with store.writing():  # a consistent listing: no transaction half done
        parts = store.parts(folder)
        if len(parts) <= max_parts:
            return
        sizes = [(part, size) for part in parts if (size := _uncompressed_bytes(store, part)) is not None]
    report.damaged.extend(part for part in parts if part in store.reader.damaged)
    for group in plan_groups(sizes, budget):
        # the lock is taken per group, so a driver's flush waits for one group at most
        with store.writing():
            visible = store.parts(folder)
            if not set(group) <= set(visible):
                continue  # a flush rewrote one of them meanwhile (a retry): the next merge sees the new ones
            # the folder's schema now (a flush may have added a column since the plan)
            _merge_group(store, folder, group, store.reader.unified_schema(visible), report)


def _uncompressed_bytes(store: ResultStore, part: str) -> int | None:
    """The uncompressed size of the part's row groups, from its footer; None where it is damaged."""
    if part in store.reader.damaged:
        return None
    try:
        meta = pq.read_metadata(store.files.abs(part), filesystem=store.fs)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        store.reader.mark_damaged(part, exc)
        return None
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


class _Unreadable(Exception):
    def __init__(self, part: str, error: BaseException) -> None:
        super().__init__(part)
        self.part, self.error = part, error


def _merge_group(store: ResultStore, folder: str, group: list[str], schema: pa.Schema, report: MergeReport) -> None:
    """Replace `group` by one part with all their rows, in one transaction; a part that fails to read
    is left in place, and the others are merged without it."""
    while len(group) >= 2:
        txn = Transaction(store.files, "merge")
        try:
            merged = txn.add_written(folder, partial(_write_union, store, group, schema))
        except _Unreadable as bad:  # its partial part is gone, nothing committed
            store.reader.mark_damaged(bad.part, bad.error)
            report.damaged.append(bad.part)
            group = [part for part in group if part != bad.part]
            continue
        for part in group:
            txn.remove(part)
        txn.commit()
        store.reader.known(merged, schema)  # what its footer says: no reader need read it back
        report.parts_in += len(group)
        report.parts_out += 1
        return


def _write_union(store: ResultStore, group: Sequence[str], schema: pa.Schema, fs: pafs.FileSystem, path: str) -> None:
    write_parquet_tables(fs, schema, _row_groups(store, group, schema), path)


def _row_groups(store: ResultStore, group: Sequence[str], schema: pa.Schema) -> Iterator[pa.Table]:
    """The rows of `group`'s parts, in order, as tables of `schema` of about ROW_GROUP_ROWS rows (or
    ROW_GROUP_BYTES): each one becomes a row group of the merged part."""
    pending: list[pa.Table] = []
    rows = size = 0
    for part in group:
        try:
            for batch in part_batches(store.fs, store.files.abs(part), schema.names, MERGE_ROWS):
                pending.append(conform(pa.Table.from_batches([batch]), schema))
                rows, size = rows + batch.num_rows, size + batch.nbytes
                if rows >= ROW_GROUP_ROWS or size >= ROW_GROUP_BYTES:
                    yield pa.concat_tables(pending)
                    pending, rows, size = [], 0, 0
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as exc:  # pages that fail to decode or to match their checksum
            raise _Unreadable(part, exc) from exc
    if pending:
        yield pa.concat_tables(pending)
