"""The Parquet result store: paths, recovery and reads, and appending parts (members, trials).

Layout under the root (a local path or any pyarrow filesystem URI such as s3://bucket/prefix):

    runs/task=<name>/part-*.parquet       the current state: one row per run, its newest attempt
    curves/task=<name>/part-*.parquet     the curve rows of exactly those attempts
    attempts/task=<name>/part-*.parquet   every attempt ever written (append-only history)
    members/part-*.parquet                which grid or study asked for which run_id
    trials/part-*.parquet                 Optuna trials (runner.store.trials)
    _store/                               lock, transaction markers, staging, quarantine

Because runs/ and curves/ are kept as the current state, any Parquet client reads them right with no
convgrid code whenever no command is running (docs/store.md). Every change is one transaction
(runner.store.txn); a driver's flush of finished runs is `runner.store.flush.write_records`. `task` is
the partition key and never a column inside the files.

The store knows data, not code: it writes the schemas its caller hands it (built from the task by
runner.grid.schema) and reads each task's schema back from the files. Who may write is the writers'
lock of runner.coord; which driver runs which cells is not the store's business.
"""

from __future__ import annotations

import errno
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from runner.coord.writers import writers_lock
from runner.fs.files import is_local
from runner.fs.root import Root, open_root
from runner.store import incoming
from runner.store.columns import (
    ATTEMPT_CURVE_COLUMNS,
    CURVE_COLUMNS,
    MEMBER_SCHEMA,
    PARTITION,
    RUN_COLUMNS,
    legacy_curve_columns,
)
from runner.store.layout import (
    ATTEMPT_CURVES,
    ATTEMPTS,
    CURVES,
    MEMBERS,
    RUNS,
    SCHEMA_TASK,
    task_dir,
    without_partition,
)
from runner.store.parts import PartReader, ReadAgain
from runner.store.runs_index import RunsIndex
from runner.store.tables import current_names, kept_curves, latest_per_run, order_keys, with_attempt
from runner.store.txn import INTERNAL, STAGING_DIR, TXN_DIR, Transaction, View, recover

if TYPE_CHECKING:
    import pyarrow.dataset as ds

ATTEMPT_CHOICES = ("kept", "superseded", "all")
STATUS_COLUMNS = ["run_id", "task", "status", "error", "finished", "batch_id"]

# task name -> (runs schema, curves schema): how a writer tells the store the columns of a task.
SchemaFor = Callable[[str], tuple[pa.Schema, pa.Schema]]
T = TypeVar("T")


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
        self.lock = writers_lock(self.root, self.files)
        self.runs_index = RunsIndex(self.files, self.reader)  # where a flush finds the runs it supersedes

    # ---- paths ---------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.base.rstrip("/"), *parts])

    def tasks(self) -> list[str]:
        """Tasks with at least one runs or attempts part."""
        return sorted(set(self.tasks_in(RUNS)) | set(self.tasks_in(ATTEMPTS)))

    def tasks_in(self, kind: str) -> list[str]:
        """Tasks with a folder in `kind` (runs, curves, attempts, attempt_curves); never the folder of
        the union's part (runner.store.union), which is no task."""
        names: set[str] = set()
        for info in self.files.listing(kind):
            if info.type == pafs.FileType.Directory and info.base_name.startswith(f"{PARTITION}="):
                names.add(info.base_name.split("=", 1)[1])
        # a committed transaction's parts may all still be in staging (its writer died before publishing)
        for final in View.of(self.files).staged:
            folder_kind, folder = final.split("/")[:2]
            if folder_kind == kind and folder.startswith(f"{PARTITION}="):
                names.add(folder.split("=", 1)[1])
        names.discard(SCHEMA_TASK)
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
        left = len(self.files.listing(TXN_DIR)) + len(self.files.listing(STAGING_DIR))
        if not left:
            return 0  # nothing to finish: no lock taken, so a read-only root reads as any other
        try:
            with self.lock.held():
                return recover(self.files, locked=self.local)
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            warnings.warn(
                f"{self.root} is read-only ({exc.strerror}): {left} files of unfinished transactions not recovered; "
                "reading what was committed (a command that can write there finishes them)",
                stacklevel=2,
            )
            return 0

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the writer lock, with every earlier crash rolled forward or back first (and workers'
        parts that no manifest will name any more deleted: runner.store.incoming)."""
        with self.lock.held():
            recover(self.files, locked=self.local)
            incoming.sweep(self.files)
            yield

    def parts(self, *directory: str) -> list[str]:
        """Visible parts (relative paths) of a folder, as of the committed transactions."""
        return View.of(self.files).parts(self.files, "/".join(directory))

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

    # ---- appending -----------------------------------------------------------------------------
    def write_part(self, table: pa.Table, *directory: str) -> str:
        """Append `table` as one new part (members, trials); atomic for every reader. Returns its path."""
        with self.writing():
            txn = Transaction(self.files)
            final = txn.add(table, "/".join(directory))
            txn.commit()
        return self.files.abs(final)

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
                self.write_part(pa.Table.from_pylist(new, schema=MEMBER_SCHEMA), MEMBERS)
        return len(new)

    # ---- reading -------------------------------------------------------------------------------
    def file_schema(self, kind: str, task: str) -> pa.Schema:
        """The schema of a task's runs, curves or attempts as its files say: the union of every part's
        columns (a later code version may have added some), with the metadata of the newest part."""
        fixed = {CURVES: CURVE_COLUMNS, ATTEMPT_CURVES: ATTEMPT_CURVE_COLUMNS}.get(kind, RUN_COLUMNS)
        rels = self.retrying(lambda: self.parts(task_dir(kind, task)))
        if kind == RUNS:  # legacy stores and a runs folder emptied by a repair: attempts say it too
            rels = rels + self.retrying(lambda: self.parts(task_dir(ATTEMPTS, task)))
        schema = self.reader.unified_schema(rels)
        if not schema.names:
            return pa.schema(fixed)
        return without_partition(schema)

    def read_members(self) -> pa.Table:
        def read() -> pa.Table:
            return self.reader.read(self.parts(MEMBERS), MEMBER_SCHEMA)

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
            # curve columns from before the naming rule read under their current names (columns.py)
            legacy = self._legacy_curve_columns(kind, task, file_schema, wanted)
            if wanted is not None and legacy:
                wanted = list(dict.fromkeys([*wanted, *(old for old, new in legacy.items() if new in wanted)]))
            missing = [c for c in wanted or [] if c not in file_schema.names]
            # A column no file has yet (a metric of runs not stored, or of a newer task version) reads
            # as nulls rather than failing: the files are the truth, and they say nothing of it.
            full = pa.unify_schemas([file_schema, pa.schema([pa.field(c, pa.null()) for c in missing])])
            table = current_names(self.reader.read(self.parts(task_dir(kind, task)), full, wanted, filter), legacy)
            if kind in (RUNS, ATTEMPTS) and (columns is None or PARTITION in columns):
                position = 1 if columns is None else columns.index(PARTITION)
                table = table.add_column(min(position, table.num_columns), PARTITION, pa.array([task] * table.num_rows))
            return table

        return self.retrying(read)

    def _legacy_curve_columns(
        self, kind: str, task: str, schema: pa.Schema, wanted: list[str] | None
    ) -> dict[str, str]:
        """The legacy columns of a task's curve parts (old name -> current); a runs column asked of the
        curves is refused, since the curve's values at each step are under the rule's name."""
        if kind not in (CURVES, ATTEMPT_CURVES):
            return {}
        run_columns = self.file_schema(RUNS, task).names
        asked = legacy_curve_columns(wanted or [], run_columns)
        if asked:
            wrong = ", ".join(f"{old!r} (the curve's is {new!r})" for old, new in asked.items())
            raise ValueError(f"{task}: {wrong} name columns of its runs, not of its curves (join them on run_id)")
        return legacy_curve_columns(schema.names, run_columns)

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
        cols = None if columns is None else list(dict.fromkeys(["run_id", "commit_seq", "finished", *columns]))
        # In a settled store runs/ holds one row per run already; de-duplicating again is cheap and
        # keeps stores written before the current layout (several attempts in runs/) right.
        newest = latest_per_run(self.read_table(RUNS, task, cols, filter))
        if columns is not None and "commit_seq" not in columns:
            newest = newest.drop_columns(["commit_seq"])  # read to order the rows, not asked for
        return newest

    def read_attempts(self, task: str, columns: list[str] | None = None) -> pa.Table:
        """Every attempt of every run of the task, in commit order (runner.store.tables.order_keys; the
        history: runs/ keeps the newest)."""
        cols = None if columns is None else list(dict.fromkeys(["run_id", "commit_seq", "finished", *columns]))
        table = self.read_table(ATTEMPTS, task, cols)
        if table.num_rows:
            table = table.sort_by([("run_id", "ascending", "at_end"), *order_keys(table, "ascending")])
        if columns is not None and "commit_seq" not in columns:
            table = table.drop_columns(["commit_seq"])  # read to order the rows, not asked for
        return table

    def read_curves(
        self,
        task: str,
        run_ids: Iterable[str] | None = None,
        columns: list[str] | None = None,
        keys: pa.Table | None = None,
        sort: bool = True,
        attempts: str = "kept",
    ) -> pa.Table:
        """Curve rows (run_id, step, ...: no attempt id) of the newest attempt of each run (optionally
        only of `run_ids`, or of the (run_id, batch_id) pairs in `keys`), sorted by run_id and step; with
        `sort=False` in the order read, which is grouped by run in step order too, and cheaper on
        millions of rows.

        `attempts="superseded"`: the curve rows of the attempts a later one replaced (attempt_curves/,
        kept since this layout; join `read_attempts` on run_id and batch_id); `"all"`: both, each row
        with its attempt's batch_id, sorted by run_id, batch_id and step."""
        if attempts not in ATTEMPT_CHOICES:
            raise ValueError(f"attempts={attempts!r}: choose one of {', '.join(ATTEMPT_CHOICES)}")
        if attempts != "kept":
            old = self._superseded_curves(task, run_ids, columns)
            if attempts == "superseded":
                return old.sort_by([("run_id", "ascending"), ("batch_id", "ascending"), ("step", "ascending")])
            runs = self.read_runs(task, columns=["batch_id"]).select(["run_id", "batch_id"])
            kept = with_attempt(self.read_curves(task, run_ids, columns, keys, sort=False), runs)
            both = pa.concat_tables([kept, old], promote_options="permissive")
            return both.sort_by([("run_id", "ascending"), ("batch_id", "ascending"), ("step", "ascending")])
        if keys is None:
            keys = self.read_runs(task, columns=["batch_id"]).select(["run_id", "batch_id"])
        if run_ids is not None:
            keys = keys.filter(pc.is_in(keys["run_id"], value_set=pa.array(list(run_ids), pa.string())))
        schema = self.file_schema(CURVES, task)
        legacy = "batch_id" in schema.names  # parts written before curves/ lost its attempt id
        wanted = ["run_id", "batch_id", "step"] if legacy else ["run_id", "step"]
        cols = None if columns is None else list(dict.fromkeys([*wanted, *columns]))
        expr = pc.field("run_id").isin(keys["run_id"]) if run_ids is not None else None
        if legacy:  # a row of the current layout has no attempt id; an older one's must be a kept attempt's
            by_batch = pc.field("batch_id").is_null() | pc.field("batch_id").isin(pc.unique(keys["batch_id"]))
            expr = by_batch if expr is None else expr & by_batch
        table = kept_curves(self.read_table(CURVES, task, cols, expr, schema=schema), keys)
        if legacy and (columns is None or "batch_id" not in columns):
            table = table.drop_columns(["batch_id"])  # one view of curves/ whatever wrote it
        return table.sort_by([("run_id", "ascending"), ("step", "ascending")]) if sort and table.num_rows else table

    def _superseded_curves(self, task: str, run_ids: Iterable[str] | None, columns: list[str] | None) -> pa.Table:
        cols = None if columns is None else list(dict.fromkeys(["run_id", "batch_id", "step", *columns]))
        expr = None if run_ids is None else pc.field("run_id").isin(pa.array(list(run_ids), pa.string()))
        return self.read_table(ATTEMPT_CURVES, task, cols, expr)
