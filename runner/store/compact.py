"""`convgrid compact [--repair]`: rewrite each task's parts into few large ones without changing what
any reader sees, in one transaction (runner.store.txn), under the writer lock, so a driver writing at
the same time waits for it and never loses a row, and a compact killed at any point changes nothing
convgrid's readers see (the next command finishes or undoes it).

Per task it writes: runs/ one part (newest attempt per run), curves/ parts of at most
CURVE_ROWS_PER_PART rows sorted by run (so a later retry rewrites one of them, not all), attempts/ one
part with every attempt (a store written before attempts/ existed gets its history from runs/).

A task with a damaged part is left alone unless `repair`: then the damaged parts move to
_store/quarantine/ and the task is rebuilt from what is readable; a run whose runs row or curve rows
were lost there loses its runs row, so the next `run` runs it again.

It also deletes the parts workers staged that no manifest will name any more (runner.store.incoming:
a dead driver's of this host at once, any other once older than the grace period).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from runner.coord.claims import remove_idle_claims
from runner.fs.files import delete_quietly
from runner.store import incoming
from runner.store.checkpoints import CheckpointStore
from runner.store.columns import MEMBER_SCHEMA, TRIAL_SCHEMA, legacy_curve_columns
from runner.store.layout import ATTEMPT_CURVES, ATTEMPTS, CURVES, RUNS, TASK_KINDS, task_dir, without_partition
from runner.store.parts import DamagedPartWarning
from runner.store.seqs import checked_max
from runner.store.store import ResultStore
from runner.store.tables import current_names, kept_curves, latest_per_run, order_keys
from runner.store.trials import newest_trials
from runner.store.txn import Transaction
from runner.store.union_check import rebuild_union

CURVE_ROWS_PER_PART = 1_000_000


@dataclass
class CompactReport:
    files_before: int = 0
    files_after: int = 0
    rows_dropped: int = 0
    quarantined: list[str] = field(default_factory=list)
    rerun: int = 0  # runs whose rows were lost with a damaged part: the next `run` runs them again
    curves_to_history: int = 0  # curve rows of those runs' attempts, moved to attempt_curves/ (not dropped)
    skipped: list[str] = field(default_factory=list)  # tasks left alone because of damaged parts
    claims_removed: int = 0  # claims folders of grids that no driver may still use
    orphans_removed: int = 0  # parts workers staged that no manifest will name any more (runner.store.incoming)
    unions_rebuilt: list[str] = field(default_factory=list)  # folders whose union part was missing or wrong
    checkpoints_removed: int = 0  # checkpoint folders of runs committed (a killed driver's leftovers)

    def line(self) -> str:
        text = (
            f"compacted {self.files_before} part files into {self.files_after}; "
            f"dropped {self.rows_dropped} superseded rows"
        )
        done = (  # what else this compaction did, each said only where it happened
            (
                self.quarantined,
                f"moved {len(self.quarantined)} damaged parts to quarantine ({self.rerun} runs will run again)",
            ),
            (self.curves_to_history, f"kept {self.curves_to_history} curve rows of their attempts in attempt_curves/"),
            (self.skipped, f"left tasks with damaged parts alone: {', '.join(self.skipped)} (use --repair)"),
            (self.claims_removed, f"removed the claims of {self.claims_removed} grids no driver is running"),
            (
                self.unions_rebuilt,
                f"rebuilt the missing or wrong union schema part of {', '.join(self.unions_rebuilt)}",
            ),
            (self.orphans_removed, f"deleted {self.orphans_removed} staged parts no driver will commit"),
            (self.checkpoints_removed, f"removed the checkpoints of {self.checkpoints_removed} committed runs"),
        )
        return text + "".join(f"; {said}" for happened, said in done if happened)


def compact(store: ResultStore, repair: bool = False) -> CompactReport:
    report = CompactReport()
    with store.writing():
        report.orphans_removed = incoming.sweep(store.files, force=True)
        _delete_old_temporaries(store)
        txn = Transaction(store.files, "compact")
        for name in store.tasks():
            _compact_task(store, txn, name, repair, report)
        for kind, schema in (("trials", TRIAL_SCHEMA), ("members", MEMBER_SCHEMA)):
            _compact_table(store, txn, kind, schema, repair, report)
        report.unions_rebuilt = [kind for kind in TASK_KINDS if rebuild_union(store, txn, kind)]
        txn.commit()
        store.reader.damaged.clear()  # quarantined ones are gone; any others are found again on read
    report.claims_removed = remove_idle_claims(store.files)  # claims are not part of the transaction
    report.checkpoints_removed = remove_committed_checkpoints(store)
    return report


def remove_committed_checkpoints(store: ResultStore) -> int:
    """Delete the checkpoints of runs the store holds (a driver deletes them after each commit; one killed
    between its commit and that leaves them). Final states stay: runs with larger budgets grow them."""
    checkpoints = CheckpointStore(store.files)
    removed = 0
    for task in store.tasks():
        held = set(checkpoints.uncommitted_runs(task))
        if held:
            stored = set(store.read_runs(task, ["run_id"])["run_id"].to_pylist())
            removed += checkpoints.discard(task, held & stored)
    return removed


def _delete_old_temporaries(store: ResultStore) -> None:
    """`.tmp-*` files that drivers from before _store/staging left in part folders when killed: plain
    clients (DuckDB, polars) read dot-files, so they must go."""
    folders = [task_dir(k, t) for t in store.tasks() for k in TASK_KINDS] + ["members", "trials"]
    for folder in folders:
        for info in store.files.listing(folder):
            if info.type == pafs.FileType.File and info.base_name.startswith(".tmp-"):
                delete_quietly(store.fs, info.path)


def _quiet_read(store: ResultStore, parts: list[str], schema: pa.Schema) -> pa.Table:
    """Read every page of `parts` (checksums verified); damaged ones are recorded in store.damaged."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedPartWarning)  # the report names them
        return store.reader.read(parts, schema)


def _compact_task(store: ResultStore, txn: Transaction, name: str, repair: bool, report: CompactReport) -> None:
    parts = {kind: store.parts(task_dir(kind, name)) for kind in TASK_KINDS}
    every = [p for kind in TASK_KINDS for p in parts[kind]]
    if not parts[RUNS] and not parts[ATTEMPTS]:
        return  # an empty task folder (made by hand, or emptied): no run to keep, nothing to rewrite
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedPartWarning)
        checked_max(store.reader, parts[ATTEMPTS], parts[RUNS])  # an impossible commit_seq: a damaged part
        runs_schema = without_partition(store.reader.unified_schema(parts[RUNS] + parts[ATTEMPTS]))
        curves_schema = store.reader.unified_schema(parts[CURVES])
        old_schema = store.reader.unified_schema(parts[ATTEMPT_CURVES] + parts[CURVES])
    all_runs = _quiet_read(store, parts[RUNS], runs_schema)
    attempts = _quiet_read(store, parts[ATTEMPTS], runs_schema)
    curves = _quiet_read(store, parts[CURVES], curves_schema) if parts[CURVES] else None
    old_curves = _quiet_read(store, parts[ATTEMPT_CURVES], old_schema) if parts[ATTEMPT_CURVES] else None
    # curve columns from before the naming rule (runner.store.columns) are rewritten under their names now
    legacy = legacy_curve_columns(old_schema.names, runs_schema.names)
    renamed = {CURVES: bool(set(legacy) & set(curves_schema.names)), ATTEMPT_CURVES: False}
    if old_curves is not None:
        renamed[ATTEMPT_CURVES] = bool(set(legacy) & set(old_curves.column_names))
        old_curves = current_names(old_curves, legacy)
    if curves is not None:
        curves = current_names(curves, legacy)
    damaged = _quarantine_damaged(store, txn, every, name, repair, report)
    if damaged is None:
        return
    readable = {kind: [p for p in parts[kind] if p not in damaged] for kind in TASK_KINDS}

    latest = latest_per_run(all_runs)
    kept_curve_rows = kept_curves(curves, latest.select(["run_id", "batch_id"])) if curves is not None else None
    if damaged and "curve_rows" in latest.column_names:
        latest = _drop_runs_missing_curves(latest, kept_curve_rows, report)
        if kept_curve_rows is not None:
            kept_curve_rows = kept_curves(kept_curve_rows, latest.select(["run_id", "batch_id"]))
    # attempts/ keeps every attempt; rows only in runs/ (a store from before attempts/) join it
    known = pc.binary_join_element_wise(attempts["run_id"], attempts["batch_id"], "/")
    pairs = pc.binary_join_element_wise(all_runs["run_id"], all_runs["batch_id"], "/")
    history = pa.concat_tables([attempts, all_runs.filter(pc.invert(pc.is_in(pairs, value_set=known)))])
    history = history.sort_by([("run_id", "ascending", "at_end"), *order_keys(history, "ascending")])
    if damaged:  # runs with an attempt but no runs row left: lost with a runs part, or dropped above
        lost = pc.invert(pc.is_in(history["run_id"], value_set=latest["run_id"]))
        report.rerun = len(set(history.filter(lost)["run_id"].to_pylist()))

    report.files_before += len(every)
    report.rows_dropped += all_runs.num_rows - latest.num_rows
    runs_out = [latest.sort_by("run_id")] if latest.num_rows else []
    _rewrite(txn, readable[RUNS], runs_out, all_runs.num_rows, task_dir(RUNS, name), report)
    _rewrite(
        txn,
        readable[ATTEMPTS],
        [history] if history.num_rows else [],
        attempts.num_rows,
        task_dir(ATTEMPTS, name),
        report,
    )
    superseded = [old_curves] if old_curves is not None else []
    if curves is not None and kept_curve_rows is not None:
        if damaged:  # the intact curves of runs that will run again are their attempts' history, not waste
            history_rows = _curves_of_lost_runs(curves, latest, history)
            if history_rows.num_rows:
                superseded.append(history_rows)
                report.curves_to_history += history_rows.num_rows
                report.rows_dropped -= history_rows.num_rows
        report.rows_dropped += curves.num_rows - kept_curve_rows.num_rows
        ordered = kept_curve_rows.sort_by([("run_id", "ascending"), ("step", "ascending")])
        if "batch_id" in ordered.column_names:  # a store from before: curves/ loses the attempt id here
            ordered = ordered.drop_columns(["batch_id"])
        rows_in = -1 if renamed[CURVES] else curves.num_rows  # a renamed column changes the part
        _rewrite(txn, readable[CURVES], _chunks(ordered), rows_in, task_dir(CURVES, name), report)
        if kept_curve_rows.num_rows < curves.num_rows and "batch_id" in curves.column_names:
            # superseded rows a store before attempt_curves/ kept in curves/ (the rest of the rows not
            # kept are of runs with no runs row left: lost with a damaged part, run again); rows with no
            # attempt id are the current layout's, kept by definition
            kept_pairs = _pairs(latest).combine_chunks()
            stale = pc.and_(pc.is_valid(curves["batch_id"]), pc.invert(pc.is_in(_pairs(curves), value_set=kept_pairs)))
            superseded.append(curves.filter(stale))
    if superseded:
        old = pa.concat_tables(superseded, promote_options="permissive")
        ordered = old.sort_by([("run_id", "ascending"), ("batch_id", "ascending"), ("step", "ascending")])
        rows_in = old_curves.num_rows if old_curves is not None else 0
        rows_in = -1 if renamed[ATTEMPT_CURVES] else rows_in
        _rewrite(txn, readable[ATTEMPT_CURVES], _chunks(ordered), rows_in, task_dir(ATTEMPT_CURVES, name), report)


def _chunks(table: pa.Table) -> list[pa.Table]:
    """Parts of at most CURVE_ROWS_PER_PART rows (so a later retry rewrites one of them, not all)."""
    return [table.slice(i, CURVE_ROWS_PER_PART) for i in range(0, table.num_rows, CURVE_ROWS_PER_PART)]


def _curves_of_lost_runs(curves: pa.Table, latest: pa.Table, history: pa.Table) -> pa.Table:
    """Curve rows with no attempt id (the current layout: a kept attempt's) of runs that have no runs row
    left (lost with a damaged part, or dropped for lost curve rows), under the batch_id of the run's
    newest attempt in `history`, the attempt that wrote them: rows for attempt_curves/, where a rerun's
    superseded attempts keep theirs. Rows of a run with no attempt on record cannot be attributed."""
    lost = pc.invert(pc.is_in(curves["run_id"], value_set=latest["run_id"]))
    if "batch_id" in curves.column_names:  # an older layout's rows with an id are handled as superseded
        lost = pc.and_(lost, pc.is_null(curves["batch_id"]))
        curves = curves.drop_columns(["batch_id"])
    newest = latest_per_run(history).select(["run_id", "batch_id"])
    return curves.filter(lost).join(newest, "run_id", join_type="inner")


def _pairs(table: pa.Table) -> pa.ChunkedArray:
    return pc.binary_join_element_wise(table["run_id"], table["batch_id"], "/")


def _drop_runs_missing_curves(latest: pa.Table, curves: pa.Table | None, report: CompactReport) -> pa.Table:
    """Runs whose kept attempt has fewer curve rows than it wrote lost them to quarantine: drop their
    runs row (their attempts stay in the history) so that the next `run` runs them again."""
    counts: dict[str, int] = {}
    if curves is not None and curves.num_rows:
        grouped = curves.group_by("run_id").aggregate([("step", "count")])
        counts = dict(zip(grouped["run_id"].to_pylist(), grouped["step_count"].to_pylist(), strict=True))
    expected = latest["curve_rows"].to_pylist()
    keep = [
        want is None or counts.get(rid, 0) >= want
        for rid, want in zip(latest["run_id"].to_pylist(), expected, strict=True)
    ]
    return latest.filter(pa.array(keep, pa.bool_()))


def _rewrite(
    txn: Transaction, old: list[str], tables: list[pa.Table], rows_in: int, directory: str, report: CompactReport
) -> None:
    """Replace the parts `old` by one part per table; nothing to do when that would change nothing
    (one part in, the same rows out), so compacting a compacted store writes nothing."""
    if len(old) == len(tables) <= 1 and sum(t.num_rows for t in tables) == rows_in:
        report.files_after += len(old)
        return
    for table in tables:
        txn.add(table, directory)
    for part in old:
        txn.remove(part)
    report.files_after += len(tables)


def _quarantine_damaged(
    store: ResultStore, txn: Transaction, parts: list[str], name: str, repair: bool, report: CompactReport
) -> list[str] | None:
    """The damaged ones of `parts` (of the task or table `name`), moved to quarantine with `repair`; without it,
    None where there are any: `name` is then left alone (listed as skipped), its parts as they are."""
    damaged = [p for p in parts if p in store.reader.damaged]
    if damaged and not repair:
        report.skipped.append(name)
        return None
    for part in damaged:
        txn.quarantine(part)
        report.quarantined.append(part)
    return damaged


def _compact_table(
    store: ResultStore, txn: Transaction, kind: str, schema: pa.Schema, repair: bool, report: CompactReport
) -> None:
    parts = store.parts(kind)
    table = _quiet_read(store, parts, schema)
    damaged = _quarantine_damaged(store, txn, parts, kind, repair, report)
    if damaged is None:
        return
    readable = [p for p in parts if p not in damaged]
    report.files_before += len(readable)
    if kind == "trials":
        unique = newest_trials(table)
    else:
        frame = table.sort_by("added").to_pandas().drop_duplicates(["grid", "run_id"], keep="first")
        unique = pa.Table.from_pandas(frame, schema=schema, preserve_index=False)
    report.rows_dropped += table.num_rows - unique.num_rows
    _rewrite(txn, readable, [unique] if unique.num_rows else [], table.num_rows, kind, report)
