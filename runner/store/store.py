"""The Parquet result store.

Layout under the root (a local path or any pyarrow filesystem URI such as s3://bucket/prefix):

    runs/task=<name>/part-*.parquet       the current state: one row per run, its newest attempt
    curves/task=<name>/part-*.parquet     the curve rows of exactly those attempts
    attempts/task=<name>/part-*.parquet   every attempt ever written (append-only history)
    members/part-*.parquet                which grid or study asked for which run_id
    trials/part-*.parquet                 Optuna trials (runner.store.trials)
    _store/                               lock, transaction markers, staging, quarantine

Because runs/ and curves/ are kept as the current state, any Parquet client reads them right with no
convgrid code whenever no command is running (docs/store.md). Every change is one transaction
(runner.store.txn): a driver's flush adds its attempts, its curves and its runs rows, and rewrites the
parts that held rows it supersedes (a retry), all or nothing. `task` is the partition key and never
a column inside the files.

The store knows data, not code: it writes the schemas its caller hands it (built from the task by
runner.grid.schema) and reads each task's schema back from the files.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from runner.store.claims import LEASE_S, Claims
from runner.store.columns import CURVE_COLUMNS, MEMBER_SCHEMA, PARTITION, RUN_COLUMNS
from runner.store.exclusive import S3IfNoneMatch, for_root
from runner.store.files import WriterLock, is_local
from runner.store.index_keys import PartKeys, part_batches
from runner.store.lease_lock import LOCK_LEASE_S, LeaseLock
from runner.store.parts import PartReader, ReadAgain
from runner.store.records import RunRecord
from runner.store.txn import INTERNAL, Root, Transaction, View, recover
from tasks.status import FINAL_STATUSES

RUNS, CURVES, ATTEMPTS = "runs", "curves", "attempts"
# the curve rows of superseded attempts: the history's curves, beside (never inside) curves/ and attempts/
ATTEMPT_CURVES = "attempt_curves"
TASK_KINDS = (RUNS, CURVES, ATTEMPTS, ATTEMPT_CURVES)
ATTEMPT_CHOICES = ("kept", "superseded", "all")
STATUS_COLUMNS = ["run_id", "task", "status", "error", "finished", "batch_id"]
# what `stored_rows` answers: where a flush finds the stored rows of its runs
ROWS_FOUND = pa.schema(
    [("part", pa.string()), ("run_id", pa.string()), ("batch_id", pa.string()), ("finished", pa.int64())]
)

# task name -> (runs schema, curves schema): how a writer tells the store the columns of a task.
SchemaFor = Callable[[str], tuple[pa.Schema, pa.Schema]]
T = TypeVar("T")


def open_root(root: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and base path for a local path or a URI (s3://, gs://, file://)."""
    text = str(root)
    if "://" in text:
        return pafs.FileSystem.from_uri(text)
    return pafs.LocalFileSystem(), str(Path(text).resolve())


def task_dir(kind: str, task: str) -> str:
    return f"{kind}/{PARTITION}={task}"


def without_partition(schema: pa.Schema) -> pa.Schema:
    index = schema.get_field_index(PARTITION)
    return schema.remove(index) if index >= 0 else schema


class ResultStore:
    def __init__(self, root: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None) -> None:
        self.root = str(root)
        if filesystem is not None:
            self.fs, self.base = filesystem, str(root)
        else:
            self.fs, self.base = open_root(root)
        self.local = is_local(self.fs)
        self.files = Root(self.fs, self.base)
        self.reader = PartReader(self.files)
        self.lock = self._writer_lock()
        # task -> runs part -> the keys of its run ids: where a flush finds the runs it supersedes
        self._part_keys: dict[str, dict[str, PartKeys]] = {}

    def _writer_lock(self) -> WriterLock | LeaseLock:
        """An flock locally; on S3 a lease on its conditional PUT (runner.store.lease_lock), whose
        transactions check before committing that the lease is still theirs."""
        exclusive = for_root(self.root, self.fs)
        if self.local or not isinstance(exclusive, S3IfNoneMatch):
            return WriterLock(self.fs, self.files.abs(f"{INTERNAL}/lock"))
        lock = LeaseLock(self.files, exclusive, float(os.environ.get("CONVGRID_LEASE_S", LOCK_LEASE_S)))
        self.files.fence = lock.check
        return lock

    # ---- paths ---------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.base.rstrip("/"), *parts])

    def tasks(self) -> list[str]:
        """Tasks with at least one runs or attempts part."""
        names: set[str] = set()
        for kind in (RUNS, ATTEMPTS):
            for info in self.files.listing(kind):
                if info.type == pafs.FileType.Directory and info.base_name.startswith(f"{PARTITION}="):
                    names.add(info.base_name.split("=", 1)[1])
        # a committed transaction's parts may all still be in staging (its writer died before publishing)
        for final in View.of(self.files).staged:
            kind, folder = final.split("/")[:2]
            if kind in (RUNS, ATTEMPTS) and folder.startswith(f"{PARTITION}="):
                names.add(folder.split("=", 1)[1])
        return sorted(names)

    @property
    def damaged(self) -> dict[str, str]:
        """Parts found unreadable so far (relative path -> error)."""
        return self.reader.damaged

    # ---- consistency ---------------------------------------------------------------------------
    def recover(self) -> int:
        """Restore what a killed command left (see runner.store.txn); every command calls it first.
        A root without _store/ has no transaction to finish: nothing is created there."""
        if not self.files.exists(INTERNAL):
            return 0
        with self.lock.held():
            return recover(self.files, locked=self.local)

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the writer lock, with every earlier crash rolled forward or back first."""
        with self.lock.held():
            recover(self.files, locked=self.local)
            yield

    def parts(self, *directory: str) -> list[str]:
        """Visible parts (relative paths) of a folder, as of the committed transactions."""
        return View.of(self.files).parts(self.files, "/".join(directory))

    def part_files(self, *directory: str) -> list[str]:
        """Absolute paths of the visible parts of a folder, oldest first."""
        return [self.files.abs(r) for r in self.parts(*directory)]

    def retrying(self, read: Callable[[], T]) -> T:
        """A transaction may publish or delete a part between our listing and our read: list again. A
        streamed read that met a damaged part (ReadAgain) starts over; each time one more part is known
        damaged and left out, so it ends."""
        missing = 0
        while True:
            try:
                return read()
            except FileNotFoundError:
                missing += 1
                if missing > 5:
                    raise
            except ReadAgain:
                continue

    def claims(self, grid_key: str, lease_s: float | None = None) -> Claims | None:
        """This driver's share of the claims on the grid whose `claims.grid_key` is `grid_key`
        (runner.store.claims), or None where the root has no create-if-absent (then drivers do not
        share work)."""
        exclusive = for_root(self.root, self.fs)
        if exclusive is None:
            return None
        lease = lease_s if lease_s is not None else float(os.environ.get("CONVGRID_LEASE_S", LEASE_S))
        return Claims(self.files, exclusive, grid_key, lease)

    # ---- writing -------------------------------------------------------------------------------
    def write_part(self, table: pa.Table, *directory: str) -> str:
        """Append `table` as one new part (members, trials); atomic for every reader. Returns its path."""
        with self.writing():
            txn = Transaction(self.files)
            final = txn.add(table, "/".join(directory))
            txn.commit()
        return self.files.abs(final)

    def write_records(self, records: Sequence[RunRecord], schemas: SchemaFor) -> None:
        """Persist finished runs in one transaction: per task, the attempts, the curves of the kept
        attempts and the runs rows, with the parts holding superseded attempts rewritten without them."""
        by_task: dict[str, list[RunRecord]] = defaultdict(list)
        for rec in records:
            by_task[rec.task].append(rec)
        if not by_task:
            return
        from runner.store.flush import stage_task

        with self.writing():
            txn = Transaction(self.files, "flush")
            for name, recs in by_task.items():
                runs_schema, curves_schema = schemas(name)
                stage_task(self, txn, name, recs, without_partition(runs_schema), curves_schema)
            txn.commit()

    def remember(self, task: str, part: str, table: pa.Table) -> None:
        """Index a runs part this process is writing, sparing the next flush from reading it back
        (if its transaction fails, the part is never visible and the next flush forgets it)."""
        self._part_keys.setdefault(task, {})[part] = PartKeys.of(table["run_id"])

    def _read_keys(self, part: str) -> PartKeys:
        """The keys of a runs part's ids, read in batches (a million-row part's ids as one column were
        ~120 MB of a flush); a part that fails midway is marked damaged and holds nothing, as on read."""
        try:
            return PartKeys.join(
                [PartKeys.of(b.column("run_id")) for b in part_batches(self.fs, self.files.abs(part), ["run_id"])]
            )
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as exc:
            self.reader.mark_damaged(part, exc)
            return PartKeys.join([])

    def stored_rows(self, task: str, parts: Sequence[str], run_ids: Sequence[str]) -> pa.Table:
        """(part, run_id, batch_id, finished) of the rows of `run_ids` in the given runs parts, with
        `finished` in integer microseconds (see `micros`).

        Each part is indexed once by the sorted 64-bit keys of its run ids (8 bytes a run, updated by
        the parts that appeared or went since the last call: parts are immutable and uniquely named),
        so a flush of new runs reads nothing back, and a flush that supersedes stored runs reads only
        the parts that hold them."""
        known = self._part_keys.setdefault(task, {})
        visible = set(self.reader.readable(parts))
        for gone in set(known) - visible:
            del known[gone]
        for new in sorted(visible - set(known)):
            known[new] = self._read_keys(new)
        wanted = PartKeys.of(pa.array(run_ids, pa.string()))
        rows = [ROWS_FOUND.empty_table()]
        for part in sorted(visible):
            if not known[part].meets(wanted):
                continue
            schema = self.reader.unified_schema([part])
            table = self.reader.read(
                [part], schema, ["run_id", "batch_id", "finished"], pc.field("run_id").isin(run_ids)
            )
            finished = pc.cast(pc.cast(table["finished"], pa.timestamp("us", "UTC")), pa.int64())
            part_column = pa.repeat(pa.scalar(part), table.num_rows)
            columns = {
                "part": part_column,
                "run_id": table["run_id"],
                "batch_id": table["batch_id"],
                "finished": finished,
            }
            rows.append(pa.table(columns, schema=ROWS_FOUND))
        return pa.concat_tables(rows)

    def write_members(self, rows: Iterable[dict[str, object]]) -> int:
        """Add membership rows not already present; returns how many were new."""
        rows = list(rows)
        if not rows:
            return 0
        with self.writing():
            have = set()
            existing = self.read_members()
            if existing.num_rows:
                have = set(zip(existing["grid"].to_pylist(), existing["run_id"].to_pylist(), strict=True))
            now = datetime.now(UTC)
            new = [{**r, "added": now} for r in rows if (r["grid"], r["run_id"]) not in have]
            if new:
                self.write_part(pa.Table.from_pylist(new, schema=MEMBER_SCHEMA), "members")
        return len(new)

    # ---- reading -------------------------------------------------------------------------------
    def file_schema(self, kind: str, task: str) -> pa.Schema:
        """The schema of a task's runs, curves or attempts as its files say: the union of every part's
        columns (a later code version may have added some), with the metadata of the newest part."""
        fixed = CURVE_COLUMNS if kind in (CURVES, ATTEMPT_CURVES) else RUN_COLUMNS
        rels = self.retrying(lambda: self.parts(task_dir(kind, task)))
        if kind == RUNS:  # legacy stores and a runs folder emptied by a repair: attempts say it too
            rels = rels + self.retrying(lambda: self.parts(task_dir(ATTEMPTS, task)))
        schema = self.reader.unified_schema(rels)
        if not schema.names:
            return pa.schema(fixed)
        return without_partition(schema)

    def read_members(self) -> pa.Table:
        def read() -> pa.Table:
            return self.reader.read(self.parts("members"), MEMBER_SCHEMA)

        return self.retrying(read)

    def read_table(
        self,
        kind: str,
        task: str,
        columns: list[str] | None = None,
        filter: ds.Expression | None = None,
        schema: pa.Schema | None = None,
    ) -> pa.Table:
        """Every visible row of one task's runs, curves or attempts (no de-duplication), with the
        `task` column filled in from the partition for runs and attempts."""

        def read() -> pa.Table:
            file_schema = schema if schema is not None else self.file_schema(kind, task)
            wanted = None if columns is None else [c for c in columns if c != PARTITION]
            missing = [c for c in wanted or [] if c not in file_schema.names]
            # A column no file has yet (a metric of runs not stored, or of a newer task version) reads
            # as nulls rather than failing: the files are the truth, and they say nothing of it.
            full = pa.unify_schemas([file_schema, pa.schema([pa.field(c, pa.null()) for c in missing])])
            table = self.reader.read(self.parts(task_dir(kind, task)), full, wanted, filter)
            if kind in (RUNS, ATTEMPTS) and (columns is None or PARTITION in columns):
                position = 1 if columns is None else columns.index(PARTITION)
                table = table.add_column(min(position, table.num_columns), PARTITION, pa.array([task] * table.num_rows))
            return table

        return self.retrying(read)

    def read_runs(
        self, task: str | None = None, columns: list[str] | None = None, filter: ds.Expression | None = None
    ) -> pa.Table:
        """The newest row of every run_id (optionally of one task), with the columns asked for.

        Without a task, tasks are read one by one and only columns common to all tasks may be asked
        for (default: STATUS_COLUMNS). `filter` (on params) is pushed into the scan: every attempt of
        a run has the same params, so filtering before de-duplication is exact.
        """
        if task is None:
            shared = list(dict.fromkeys(["run_id", "finished", *(columns or STATUS_COLUMNS)]))
            parts = [self.read_runs(t, shared, filter) for t in self.tasks()]
            if not parts:
                fixed = {f.name: f for f in [*RUN_COLUMNS, pa.field(PARTITION, pa.string())]}
                return pa.schema([fixed[c] for c in shared]).empty_table()
            return pa.concat_tables(parts, promote_options="permissive")
        cols = None if columns is None else list(dict.fromkeys(["run_id", "finished", *columns]))
        # In a settled store runs/ holds one row per run already; de-duplicating again is cheap and
        # keeps stores written before the current layout (several attempts in runs/) right.
        return latest_per_run(self.read_table(RUNS, task, cols, filter))

    def read_attempts(self, task: str, columns: list[str] | None = None) -> pa.Table:
        """Every attempt of every run of the task, oldest first (the history; runs/ keeps the newest)."""
        table = self.read_table(ATTEMPTS, task, columns)
        if table.num_rows and "finished" in table.column_names:
            table = table.sort_by([("run_id", "ascending"), ("finished", "ascending")])
        return table

    def done_ids(self, task: str | None = None) -> set[str]:
        """Run ids whose newest row is final (ok or diverged): these are never run again."""
        table = self.read_runs(task, columns=["status"])
        mask = pc.is_in(table["status"], value_set=pa.array(sorted(FINAL_STATUSES)))
        return set(table.filter(mask)["run_id"].to_pylist())

    def read_curves(
        self,
        task: str,
        run_ids: Iterable[str] | None = None,
        columns: list[str] | None = None,
        keys: pa.Table | None = None,
        sort: bool = True,
        attempts: str = "kept",
    ) -> pa.Table:
        """Curve rows of the newest attempt of each run (optionally only of `run_ids`, or of the
        (run_id, batch_id) pairs in `keys`), sorted by run_id and step; with `sort=False` in the
        order read, which is grouped by run in step order too, and cheaper on millions of rows.

        `attempts="superseded"`: the curve rows of the attempts a later one replaced (attempt_curves/,
        kept since this layout; join `read_attempts` on run_id and batch_id); `"all"`: both, sorted
        by run_id, batch_id and step."""
        if attempts not in ATTEMPT_CHOICES:
            raise ValueError(f"attempts={attempts!r}: choose one of {', '.join(ATTEMPT_CHOICES)}")
        if attempts != "kept":
            old = self._superseded_curves(task, run_ids, columns)
            if attempts == "superseded":
                return old.sort_by([("run_id", "ascending"), ("batch_id", "ascending"), ("step", "ascending")])
            kept = self.read_curves(task, run_ids, columns, keys, sort=False)
            both = pa.concat_tables([kept, old], promote_options="permissive")
            return both.sort_by([("run_id", "ascending"), ("batch_id", "ascending"), ("step", "ascending")])
        if keys is None:
            keys = self.read_runs(task, columns=["batch_id"]).select(["run_id", "batch_id"])
        if run_ids is not None:
            keys = keys.filter(pc.is_in(keys["run_id"], value_set=pa.array(list(run_ids), pa.string())))
        cols = None if columns is None else list(dict.fromkeys(["run_id", "batch_id", "step", *columns]))
        expr = pc.field("batch_id").isin(pc.unique(keys["batch_id"]))
        if run_ids is not None:
            expr = expr & pc.field("run_id").isin(keys["run_id"])
        table = kept_curves(self.read_table(CURVES, task, cols, expr), keys)
        return table.sort_by([("run_id", "ascending"), ("step", "ascending")]) if sort and table.num_rows else table

    def _superseded_curves(self, task: str, run_ids: Iterable[str] | None, columns: list[str] | None) -> pa.Table:
        cols = None if columns is None else list(dict.fromkeys(["run_id", "batch_id", "step", *columns]))
        expr = None if run_ids is None else pc.field("run_id").isin(pa.array(list(run_ids), pa.string()))
        return self.read_table(ATTEMPT_CURVES, task, cols, expr)


def micros(column: pa.ChunkedArray | pa.Array) -> list[int | None]:
    """Timestamps as integer microseconds since the epoch, for comparing in Python: a Python datetime
    costs about 5 µs to make, which was a tenth of a flush's time in the index of runs parts."""
    return list(pc.cast(pc.cast(column, pa.timestamp("us", "UTC")), pa.int64()).to_pylist())


def kept_curves(table: pa.Table, keys: pa.Table) -> pa.Table:
    """The rows of `table` whose (run_id, batch_id) is in `keys`, in the order read: each run's rows
    lie in one part, written in step order, so they come grouped by run in step order (sorting 10
    million rows would cost more than the whole read). In a settled store that is every row read;
    rows of superseded attempts appear only in stores written before the current layout."""
    if table.num_rows == 0:
        return table
    position = pc.index_in(table["run_id"], value_set=keys["run_id"])
    expected = pc.take(keys["batch_id"], position)
    keep = pc.fill_null(pc.equal(expected, table["batch_id"]), False)
    return table if pc.all(keep).as_py() else table.filter(keep)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly `schema`'s columns, in its order and types (absent ones as nulls)."""
    if table.schema.equals(schema, check_metadata=True):
        return table
    columns = [
        table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type) for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def latest_per_run(table: pa.Table) -> pa.Table:
    """Keep the newest row (by `finished`) of each run_id; duplicates come from retries or two drivers."""
    if table.num_rows == 0:
        return table
    table = table.sort_by([("run_id", "ascending"), ("finished", "descending")])
    ids = table["run_id"]
    keep = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))
    first = pa.concat_arrays([pa.array([True]), keep.combine_chunks()])
    return table.filter(first)


def new_batch_id() -> str:
    return uuid.uuid4().hex
