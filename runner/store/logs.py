"""The `logs/` table: what each attempt of a run printed, warned and logged (issue 46).

One row per attempt that wrote anything or ended with an error (runner.execute.run_output captures
the output, bounded to its tail), committed in the flush that stores the attempt, in the same
transaction: its `batch_id` joins attempts/ on (run_id, batch_id), so a run's history keeps every
attempt's output, and a superseded attempt's log stays with it. An attempt whose worker died before it
finished has no attempts/ row; what it printed up to then is kept in the log of the attempt that ran it
again, after a marker line (runner.execute.live_output). Kept out of runs/ so that a plain
`read_parquet("results/runs")` never reads up to 64 Ki characters of text per run; no `task` partition
either: one schema, like members/ and trials/.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from runner.store.layout import LOGS
from runner.store.records import RunRecord
from runner.store.store import ResultStore
from runner.store.txn import Transaction

LOG_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("batch_id", pa.string(), nullable=False),  # the attempt's (join attempts/ on run_id, batch_id)
        pa.field("status", pa.string(), nullable=False),  # the attempt's
        pa.field("finished", pa.timestamp("us", tz="UTC")),
        pa.field("log", pa.large_string(), nullable=False),
        pa.field("error", pa.large_string()),  # the attempt's error (a traceback), as in runs/
    ]
)


def stage_logs(txn: Transaction, records: Sequence[RunRecord], batch_ids: Sequence[str]) -> None:
    """Add the logs of `records` (those that wrote anything) to the flush's transaction; `batch_ids`: the
    attempt id each record was stored under."""
    rows = [
        {
            "run_id": rec.run_id,
            "task": rec.task,
            "batch_id": batch_id,
            "status": rec.status,
            "finished": rec.row.get("finished"),
            "log": rec.log,
            "error": rec.row.get("error"),
        }
        for rec, batch_id in zip(records, batch_ids, strict=True)
        if rec.log or rec.row.get("error")
    ]
    if rows:
        txn.add(pa.Table.from_pylist(rows, schema=LOG_SCHEMA), LOGS)


@dataclass(frozen=True)
class AttemptLog:
    run_id: str
    task: str
    batch_id: str
    status: str
    finished: datetime | None
    log: str
    error: str | None


def read_logs(store: ResultStore, run_ids: Sequence[str] | None = None) -> list[AttemptLog]:
    """The logs of `run_ids` (every run's if None), oldest attempt first."""
    expr = None if run_ids is None else pc.field("run_id").isin(list(run_ids))
    table = store.retrying(lambda: store.reader.read(store.parts(LOGS), LOG_SCHEMA, filter=expr))
    table = table.sort_by([("run_id", "ascending"), ("finished", "ascending")])
    return [AttemptLog(**row) for row in table.to_pylist()]


def logged_runs(store: ResultStore) -> set[str]:
    """The run ids with a stored log (one column read)."""
    table = store.retrying(lambda: store.reader.read(store.parts(LOGS), LOG_SCHEMA, columns=["run_id"]))
    return set(table["run_id"].to_pylist())
