"""Where things lie under a results root: the folders of the data, partitioned by task."""

from __future__ import annotations

import pyarrow as pa

from runner.store.columns import PARTITION

RUNS, CURVES, ATTEMPTS = "runs", "curves", "attempts"
# the curve rows of superseded attempts: the history's curves, beside (never inside) curves/ and attempts/
ATTEMPT_CURVES = "attempt_curves"
TASK_KINDS = (RUNS, CURVES, ATTEMPTS, ATTEMPT_CURVES)
MEMBERS, TRIALS = "members", "trials"
# what each attempt printed, warned and logged (runner.store.logs): no task partition, one schema
LOGS = "logs"
# The partition of a folder's union part (runner.store.union): no task; every listing of tasks skips it.
SCHEMA_TASK = "_schema"


def task_dir(kind: str, task: str) -> str:
    return f"{kind}/{PARTITION}={task}"


def without_partition(schema: pa.Schema) -> pa.Schema:
    index = schema.get_field_index(PARTITION)
    return schema.remove(index) if index >= 0 else schema
