"""A driver's flush: finished runs written in one transaction, keeping runs/ and curves/ the current state.

`write_records` takes the writers' lock, recovers what a crash left, and commits one transaction; per
task (`stage_task`):
  - every new attempt goes to attempts/ (the history keeps all of them), numbered with the task's next
    commit sequence (`commit_seq`): the store's order of attempts, never a clock's;
  - a new attempt supersedes every stored attempt of its run, since this transaction commits after
    them (a driver's or a worker's clock an hour behind changes nothing); of two records of one run in
    one flush, the later to arrive wins;
  - the parts of runs/ and curves/ holding a superseded attempt are rewritten without it, in the same
    part as the new rows; so are parts whose schema differs from the task's current one (a new task
    version's column), so that one task's files always share one schema, as polars requires;
  - the kept attempts' rows go to runs/ and their curve rows to curves/; the curve rows of the
    attempts they supersede move to attempt_curves/ (the history's curves).

A record whose curve rows a worker already wrote (`RunRecord.staged`, runner.store.incoming) brings its
runs row and the part's name only: the part is published into curves/ as it is, unread, when this
transaction keeps every run it holds with the part's schema; otherwise (a run of it superseded within
the flush, a record stored alone after a bad value, a task whose stored parts have other columns) the
rows it keeps are read from it and written with the others, and the part is left for the incoming
cleanup. Every staged part is first checked to be there, whole (`incoming.lost`).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Sequence
from itertools import chain
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.coord.lease_lock import LockLost
from runner.store import incoming
from runner.store.columns import PARTITION, legacy_curve_columns
from runner.store.layout import ATTEMPT_CURVES, ATTEMPTS, CURVES, RUNS, task_dir, without_partition
from runner.store.logs import stage_logs
from runner.store.records import RunRecord
from runner.store.store import ResultStore, SchemaFor
from runner.store.tables import conform, current_names, last_per_run, latest_per_run, with_attempt
from runner.store.txn import Transaction
from runner.store.union import stage_union

if TYPE_CHECKING:
    import pyarrow.dataset as ds

# Takes of the writers' lock for one flush whose lease lapsed before its commit point (runner.coord).
COMMIT_TRIES = 3


def write_records(store: ResultStore, records: Sequence[RunRecord], schemas: SchemaFor) -> None:
    """Persist finished runs in one transaction: per task, the attempts, the curves of the kept
    attempts and the runs rows, with the parts holding superseded attempts rewritten without them."""
    for attempt in range(COMMIT_TRIES):
        try:
            _write_once(store, records, schemas)
            return
        except LockLost:
            # this writer's lease lapsed (it was paused) and nothing of the transaction was committed:
            # take the lock again and build it anew on what others committed meanwhile
            if attempt == COMMIT_TRIES - 1:
                raise


def _write_once(store: ResultStore, records: Sequence[RunRecord], schemas: SchemaFor) -> None:
    by_task: dict[str, list[RunRecord]] = defaultdict(list)
    for rec in records:
        by_task[rec.task].append(rec)
    if not by_task:
        return
    with store.writing():
        gone = incoming.lost(store.files, {rec.staged.path for rec in records if rec.staged is not None})
        if gone:  # cleaned from under a driver paused past the grace period, or deleted by hand
            raise incoming.StagedPartLost(f"staged curve parts missing or cut short: {', '.join(gone)}")
        txn = Transaction(store.files, "flush")
        written = {name: schemas(name) for name in by_task}
        for name, recs in by_task.items():
            runs_schema, curves_schema = written[name]
            batch_id = stage_task(store, txn, name, recs, without_partition(runs_schema), curves_schema)
            stage_logs(txn, recs, [r.staged.batch_id if r.staged is not None else batch_id for r in recs])
        # a folder read whole by a plain Parquet client shows every task's columns (runner.store.union)
        adding = {tuple(final.split("/")[:2]) for _, final in txn.marker.adds}
        for kind, index in ((RUNS, 0), (ATTEMPTS, 0), (CURVES, 1), (ATTEMPT_CURVES, 1)):
            here = {name: pair[index] for name, pair in written.items() if (kind, f"{PARTITION}={name}") in adding}
            stage_union(store, txn, kind, here)
        txn.commit()


def curve_table(recs: Sequence[RunRecord], schema: pa.Schema) -> pa.Table:
    """The curve rows of `recs` (curves/: no attempt id, runner.store.columns), built column by column:
    the ids by one `take` of each record's id repeated over its steps, the values from one flattened
    list per column (a Python loop over rows was most of a flush's CPU time)."""
    lengths = [len(rec.curve.get("step", [])) for rec in recs]
    owner = np.repeat(np.arange(len(recs)), lengths)
    columns = []
    for field in schema:
        if field.name == "run_id":
            columns.append(pa.array([rec.run_id for rec in recs], pa.string()).take(owner))
            continue
        values = (rec.curve.get(field.name, [None] * n) for rec, n in zip(recs, lengths, strict=True))
        columns.append(pa.array(list(chain.from_iterable(values)), field.type))
    return pa.Table.from_arrays([c.cast(f.type) for c, f in zip(columns, schema, strict=True)], schema=schema)


def _same(a: pa.Schema, b: pa.Schema | None) -> bool:
    return b is not None and a.equals(b, check_metadata=False)


def stage_task(
    store: ResultStore,
    txn: Transaction,
    task: str,
    recs: Sequence[RunRecord],
    runs_schema: pa.Schema,
    curves_schema: pa.Schema,
) -> str:
    """Stage one task's records (see the module); returns the attempt id of those not staged by a worker."""
    batch_id = uuid.uuid4().hex
    reader = store.reader
    runs_dir, curves_dir = task_dir(RUNS, task), task_dir(CURVES, task)
    attempts_dir = task_dir(ATTEMPTS, task)
    listed_runs = reader.readable(store.parts(runs_dir))
    seq = store.runs_index.next_seq(reader.readable(store.parts(attempts_dir)), listed_runs)
    rows = [
        {
            **rec.row,
            "batch_id": rec.staged.batch_id if rec.staged is not None else batch_id,
            "curve_rows": rec.curve_rows,
            "commit_seq": seq,
        }
        for rec in recs
    ]
    new = pa.Table.from_pylist(rows, schema=runs_schema)
    run_parts = reader.readable(listed_runs)  # less any part whose commit_seq was found impossible
    # a store from before this layout has `task` inside its files: the rewritten parts drop it
    target = without_partition(reader.unified_schema(run_parts, base=runs_schema))
    history = [conform(new, target)]

    # Every new attempt wins (the last of a run's records in this flush), superseding the stored rows of its run.
    kept = last_per_run(new)
    gone = store.runs_index.stored_rows(task, run_parts, kept["run_id"].to_pylist())

    rewrite = set(gone["part"].to_pylist()) | {p for p in run_parts if not _same(target, reader.schema(p))}
    survivors = [
        reader.read([p], target).filter(~pc.field("run_id").isin(gone["run_id"].combine_chunks()))
        for p in sorted(rewrite)
    ]
    table = pa.concat_tables([conform(kept, target), *survivors])
    newest = latest_per_run(table) if survivors else table  # `kept` alone is one row per run already
    if newest.num_rows < table.num_rows:  # older attempts kept in runs/ by a store from before attempts/
        pairs = pc.binary_join_element_wise(newest["run_id"], newest["batch_id"], "/")
        every = pc.binary_join_element_wise(table["run_id"], table["batch_id"], "/")
        history.append(table.filter(pc.invert(pc.is_in(every, value_set=pairs))))
    attempts = pa.concat_tables(history)
    store.runs_index.written(_add(store, txn, attempts, attempts_dir), seq, attempts.num_rows)
    if newest.num_rows:
        store.runs_index.remember(task, _add(store, txn, newest, runs_dir), newest)
    for part in rewrite:
        txn.remove(part)

    curve_parts = reader.readable(store.parts(curves_dir))
    stored = reader.unified_schema(curve_parts, base=curves_schema)
    # a part from before the curve naming rule (runner.store.columns) differs from the target, so it is
    # rewritten below with its legacy columns under their current names
    legacy = legacy_curve_columns(stored.names, target.names)
    ctarget = pa.schema([f for f in stored if f.name not in legacy], metadata=stored.metadata)
    chosen = {rec.run_id: rec for rec in recs}  # one record per run: the last, whose row was kept
    fresh = curve_table([r for r in chosen.values() if r.staged is None], curves_schema)
    copied = _adopt_staged(store, txn, list(chosen.values()), ctarget, curves_dir)
    stale = pc.field("run_id").isin(gone["run_id"].combine_chunks())  # curves/ holds a run's kept attempt only
    crewrite = _parts_with_rows(store, curve_parts, ctarget, stale) if gone.num_rows else set()
    crewrite |= {p for p in curve_parts if not _same(ctarget, reader.schema(p))}
    csurvivors, superseded = [], []
    for part in sorted(crewrite):
        rows_ = conform(current_names(reader.read([part], stored), legacy), ctarget)
        doomed = _pairs_mask(rows_, gone)
        csurvivors.append(rows_.filter(pc.invert(doomed)))
        superseded.append(rows_.filter(doomed))
        txn.remove(part)
    ctable = pa.concat_tables([conform(fresh, ctarget), *copied, *csurvivors])
    if ctable.num_rows:
        _add(store, txn, ctable, curves_dir)
    old = pa.concat_tables(superseded) if superseded else None
    if old is not None and old.num_rows:  # the history keeps them, with their attempt's id, out of curves/
        _add(store, txn, with_attempt(old, gone.select(["run_id", "batch_id"])), task_dir(ATTEMPT_CURVES, task))
    return batch_id


def _adopt_staged(
    store: ResultStore, txn: Transaction, kept: Sequence[RunRecord], schema: pa.Schema, directory: str
) -> list[pa.Table]:
    """Publish the staged parts of the kept records into `directory` as they are where that is exact;
    return the rows to copy from the others (see the module's docstring)."""
    by_part: dict[str, list[RunRecord]] = defaultdict(list)
    for rec in kept:
        if rec.staged is not None:
            by_part[rec.staged.path].append(rec)
    copied = []
    for path, recs in by_part.items():
        part = recs[0].staged
        assert part is not None
        if len(recs) == part.runs and _same(schema, part.schema):
            store.reader.known(txn.adopt(path, directory), part.schema)
            continue
        rows = store.reader.read([path], schema, filter=pc.field("run_id").isin([r.run_id for r in recs]))
        if path in store.reader.damaged or rows.num_rows != sum(r.curve_rows for r in recs):
            raise incoming.StagedPartLost(f"staged curve part {path} does not hold the rows its manifest names")
        copied.append(conform(rows, schema))
    return copied


def _add(store: ResultStore, txn: Transaction, table: pa.Table, directory: str) -> str:
    final = txn.add(table, directory)
    store.reader.known(final, table.schema)
    return final


def _parts_with_rows(store: ResultStore, parts: Sequence[str], schema: pa.Schema, expr: ds.Expression) -> set[str]:
    """Curve parts holding a row that matches `expr` (row-group statistics on run_id prune the scan)."""
    found = set()
    for part in parts:
        if store.reader.read([part], schema, columns=["run_id"], filter=expr).num_rows:
            found.add(part)
    return found


def _pairs_mask(rows: pa.Table, gone: pa.Table) -> pa.ChunkedArray:
    """True where a curve row belongs to a run whose stored attempt is superseded (every row of it in
    curves/: the kept attempt's, or, in a store written before, any older attempt's left there)."""
    if gone.num_rows == 0 or rows.num_rows == 0:
        return pa.chunked_array([pa.array([False] * rows.num_rows)])
    return pc.is_in(rows["run_id"], value_set=gone["run_id"].combine_chunks())
