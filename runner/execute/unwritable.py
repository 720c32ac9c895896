"""A record the store cannot take must not take others with it.

Writing a buffer of finished runs is one Parquet part per task: one bad value (a summary metric of
the wrong type, say) would fail the whole part, and every rerun would compute and lose the same runs
again. `write_isolated` writes what it can and stores each offender as a `failed` run whose error
says why, so the next `run` reports it instead of crashing on it.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Sequence

from runner.errors import StoreIOError
from runner.store import ResultStore, RunRecord, SchemaFor
from runner.store.flush import write_records
from tasks.status import FAILED

# Columns a failed record keeps: what identifies the run and how it ran (params, provenance).
_KEPT = (
    "run_id",
    "task",
    "version",
    "params_json",
    "wall_s",
    "started",
    "finished",
    "host",
    "device",
    "gpu_name",
    "gpu_memory_gb",
    "code_version",
    "packages",
)  # fmt: skip - one tuple of names, kept short


def as_unwritable(record: RunRecord, reason: str) -> RunRecord:
    row = {k: record.row.get(k) for k in _KEPT}
    row.update(status=FAILED, error=f"the store could not take this run's results: {reason}")
    params = json.loads(str(record.row["params_json"]))  # the params, without the summary that failed
    return RunRecord(record.run_id, record.task, {**params, **row}, {}, log=record.log)


def write_isolated(store: ResultStore, records: Sequence[RunRecord], schemas: SchemaFor) -> list[RunRecord]:
    """Write records; returns those that had to be stored as `failed` (empty when all went in). An
    error of the store's own I/O (an OSError: a full disk, a read-only root) is no run's fault: it is
    raised as StoreIOError, and no record is stored as failed for it."""
    try:
        write_records(store, records, schemas)
        return []
    except OSError as exc:
        raise StoreIOError(store.root, exc, len(records)) from exc
    except Exception:  # noqa: BLE001 - a value the store cannot take: find the offenders one by one below
        if len(records) == 1:
            failed = as_unwritable(records[0], traceback.format_exc(limit=3).strip().splitlines()[-1])
            write_records(store, [_params_only(failed, schemas)], schemas)
            return [failed]
    bad: list[RunRecord] = []
    for record in records:
        bad.extend(write_isolated(store, [record], schemas))
    return bad


def _params_only(record: RunRecord, schemas: SchemaFor) -> RunRecord:
    """Drop any column the task's schema does not know, so that the failed row itself is writable."""
    runs_schema, _ = schemas(record.task)
    known = set(runs_schema.names)
    return RunRecord(
        record.run_id, record.task, {k: v for k, v in record.row.items() if k in known}, {}, log=record.log
    )
