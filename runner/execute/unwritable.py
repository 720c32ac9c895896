"""A record the store cannot take must not take others with it.

Writing a buffer of finished runs is one Parquet part per task: one bad value (a summary metric of
the wrong type, say) would fail the whole part, and every rerun would compute and lose the same runs
again. `write_isolated` writes what it can and stores each offender as a `failed` run whose error
says why, so the next `run` reports it instead of crashing on it.

Only a run's own data makes it `failed` (planning skips a failed run without `--retry-failed`): a
record is an offender when its own rows cannot be built with its task's columns, as the flush builds
them (`data_problem`). Any other error (a staged part lost, a fault in the flush itself) is no run's:
it ends the command with one message (runner.errors.StoreWriteError) and its runs stay not done.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Sequence

import pyarrow as pa

from runner.errors import StoreIOError, StoreWriteError
from runner.store import ResultStore, RunRecord, SchemaFor
from runner.store.columns import RUN_COLUMNS
from runner.store.flush import curve_table, write_records
from runner.store.layout import RUNS, task_dir, without_partition
from runner.store.tables import conform
from tasks.status import FAILED

# What a run produced (its outcome, and what the store numbers): a failed record drops these. It keeps
# every other shared runs/ column, what identifies the run and how it ran (params, provenance), so a
# column added to RUN_COLUMNS is kept unless it is named here.
_OUTCOME = frozenset({"status", "error", "batch_id", "flops", "n_steps", "diverged_step", "curve_rows", "commit_seq"})
_KEPT = ("task", *(f.name for f in RUN_COLUMNS if f.name not in _OUTCOME))


def as_unwritable(record: RunRecord, reason: str) -> RunRecord:
    row = {k: record.row.get(k) for k in _KEPT}
    row.update(status=FAILED, error=f"the store could not take this run's results: {reason}")
    params = json.loads(str(record.row["params_json"]))  # the params, without the summary that failed
    return RunRecord(record.run_id, record.task, {**params, **row}, {}, log=record.log)


def write_isolated(store: ResultStore, records: Sequence[RunRecord], schemas: SchemaFor) -> list[RunRecord]:
    """Write records; returns those that had to be stored as `failed` (empty when all went in). An
    error of the store's own I/O (an OSError: a full disk, a read-only root) is no run's fault: it is
    raised as StoreIOError; any other error that no record's own data explains as StoreWriteError. No
    record is stored as failed for either."""
    try:
        write_records(store, records, schemas)
        return []
    except OSError as exc:
        raise StoreIOError(store.root, exc, len(records)) from exc
    except Exception as exc:  # noqa: BLE001 - a value the store cannot take, or a fault that is no run's
        targets: dict[str, pa.Schema] = {}  # task -> its stored runs columns: one listing per task
        problems = {r.run_id: p for r in records if (p := data_problem(store, r, schemas, targets)) is not None}
        if not problems:
            raise StoreWriteError(store.root, exc, len(records)) from exc
    failed = [as_unwritable(r, problems[r.run_id]) for r in records if r.run_id in problems]
    good = [r for r in records if r.run_id not in problems]
    stored = write_isolated(store, good, schemas) if good else []
    for record in failed:
        write_records(store, [_params_only(record, schemas)], schemas)
    return [*stored, *failed]


def data_problem(
    store: ResultStore, record: RunRecord, schemas: SchemaFor, targets: dict[str, pa.Schema] | None = None
) -> str | None:
    """Why this record's own rows cannot be stored (None: they can): its runs row and curve rows built
    with its task's columns, and the row cast to the columns the task's stored parts have, as a flush
    does (runner.store.flush.stage_task). Nothing is written."""
    runs_schema, curves_schema = schemas(record.task)
    runs_schema = without_partition(runs_schema)
    known = {} if targets is None else targets
    if record.task not in known:  # the store's own reads: an error here is no record's (raised)
        parts = store.reader.readable(store.parts(task_dir(RUNS, record.task)))
        known[record.task] = without_partition(store.reader.unified_schema(parts, base=runs_schema))
    try:
        row = {**record.row, "batch_id": "x", "curve_rows": record.curve_rows, "commit_seq": 1}
        table = pa.Table.from_pylist([row], schema=runs_schema)
        if record.staged is None:
            curve_table([record], curves_schema)
        conform(table, known[record.task])
    except Exception:  # noqa: BLE001 - whatever building its rows raises is the record's
        return traceback.format_exc(limit=3).strip().splitlines()[-1]
    return None


def _params_only(record: RunRecord, schemas: SchemaFor) -> RunRecord:
    """Drop any column the task's schema does not know, so that the failed row itself is writable."""
    runs_schema, _ = schemas(record.task)
    known = set(runs_schema.names)
    return RunRecord(
        record.run_id, record.task, {k: v for k, v in record.row.items() if k in known}, {}, log=record.log
    )
