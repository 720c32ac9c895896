"""The columns every store file has, whatever task wrote it: the store's own vocabulary.

Task-specific columns (one per param and per summary metric or curve field) are added by the layer
that knows the task (runner.grid.schema); the store reads them back from the files themselves.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import pyarrow as pa

# The hive partition key of runs/, curves/ and attempts/ (`task=<name>` folders). It is never a column
# inside the files: a reader that derives it from the path and also finds it in the file fails.
PARTITION = "task"

# Columns every runs/ row has. Params, then summary metrics, are added per task after these. Together
# with `task` (from the path) they are the documented shared set every task's runs files carry, what a
# plain Parquet client reads across the whole runs/ folder (README "Results schema").
RUN_COLUMNS: list[pa.Field] = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("version", pa.string(), nullable=False),
    pa.field("status", pa.string(), nullable=False),
    pa.field("error", pa.string()),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("params_json", pa.string(), nullable=False),
    pa.field("wall_s", pa.float64()),
    pa.field("flops", pa.float64()),
    pa.field("n_steps", pa.int64()),
    pa.field("diverged_step", pa.int64()),
    pa.field("started", pa.timestamp("us", tz="UTC")),
    pa.field("finished", pa.timestamp("us", tz="UTC")),
    pa.field("host", pa.string()),
    pa.field("device", pa.string()),
    # The GPU a run computed on (torch's device name and total memory), null for a run on the CPU.
    pa.field("gpu_name", pa.string()),
    pa.field("gpu_memory_gb", pa.float64()),
    pa.field("code_version", pa.string()),
    pa.field("packages", pa.string()),
    # How many curve rows the attempt wrote: a run whose curves were lost (a damaged part moved to
    # quarantine) is found by it and runs again.
    pa.field("curve_rows", pa.int64()),
    # The store's own order of a task's attempts: the number of the transaction that wrote the row (one
    # more than the task's largest before it), so the newest attempt never depends on a clock. Null in
    # rows written before it existed (ordered by `finished`, oldest first).
    pa.field("commit_seq", pa.int64()),
    # Where the attempt started (runner.execute.checkpointing): the step of the checkpoint it resumed from
    # (null: step 0), and the run whose final state it grew (a run of the same config with a smaller
    # budget; null: its own checkpoint, or none).
    pa.field("resumed_from", pa.int64()),
    pa.field("grown_from", pa.string()),
]
SHARED_RUN_COLUMNS: list[str] = [f.name for f in RUN_COLUMNS] + [PARTITION]
# curves/ holds the rows of each run's kept attempt only, so its rows need no attempt id: they join runs/
# on run_id alone, with no column in common (before, batch_id was in both). attempt_curves/, the
# history's curves, keeps the attempt's batch_id, to join attempts/ on (run_id, batch_id).
CURVE_COLUMNS: list[pa.Field] = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("step", pa.int64(), nullable=False),
]
ATTEMPT_CURVE_COLUMNS: list[pa.Field] = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("batch_id", pa.string(), nullable=False),
    pa.field("step", pa.int64(), nullable=False),
]
# The one naming rule between the two: curves/ and runs/ of a task share run_id alone, so that
# `curves.merge(runs, on="run_id")` in plain pandas needs no suffixes and `by=["lr"]` names one column. A
# curve field named like a column of the task's runs (a param such as deep_linear's `lr`, a summary metric
# such as its `loss`, the store's `flops`) is stored as `<name>_t`: its value at step t, where the runs
# column holds the run's param or final value. Files written before the rule hold such a field under its
# own name; readers and rewrites find it by the same rule (`legacy_curve_columns`).
AT_STEP = "_t"


def curve_column(name: str, run_columns: Collection[str]) -> str:
    """The curves/ column of a task's curve field `name`, given the column names of the task's runs."""
    return f"{name}{AT_STEP}" if name in run_columns and name != "run_id" else name


def legacy_curve_columns(curve_columns: Iterable[str], run_columns: Collection[str]) -> dict[str, str]:
    """Columns of a task's curve parts written before the rule (named like one of `run_columns`) mapped
    to the name the rule gives them now; run_id, step and a legacy part's batch_id are the store's own."""
    own = {f.name for f in ATTEMPT_CURVE_COLUMNS}
    return {c: curve_column(c, run_columns) for c in curve_columns if c in run_columns and c not in own}


MEMBER_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("grid", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # "grid" or "study"
        pa.field("source", pa.string()),
        pa.field("block", pa.int32()),
        pa.field("added", pa.timestamp("us", tz="UTC")),
    ]
)


TRIAL_SCHEMA = pa.schema(
    [
        pa.field("study", pa.string(), nullable=False),
        pa.field("storage", pa.string(), nullable=False),  # where the study lives, password removed
        pa.field("number", pa.int64(), nullable=False),
        pa.field("state", pa.string(), nullable=False),  # COMPLETE, PRUNED or FAIL
        pa.field("params_json", pa.string(), nullable=False),  # the sampled params (run_id has them all)
        pa.field("values", pa.list_(pa.float64())),
        pa.field("value", pa.float64()),  # values[0], for one-objective studies
        pa.field("run_id", pa.string()),  # null when the sampled params were invalid for the task
        pa.field("task", pa.string(), nullable=False),
        pa.field("run_status", pa.string()),  # the run's status in runs/ (ok, diverged, pruned, ...)
        pa.field("note", pa.string()),
        pa.field("datetime_start", pa.timestamp("us", tz="UTC")),
        pa.field("datetime_complete", pa.timestamp("us", tz="UTC")),
        pa.field("written", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)


_STRING = (pa.string(), pa.large_string())
# The columns a part must have, by the folder it lies in, and the types every column the store itself
# declares must have wherever it appears (a part with a string column turned binary is not read as one).
_REQUIRED: dict[str, tuple[str, ...]] = {
    "runs": ("run_id", "status"),
    "attempts": ("run_id", "status"),
    "curves": ("run_id", "step"),
    "attempt_curves": ("run_id", "step"),
    "members": ("run_id", "grid"),
    "trials": ("study", "number"),
}
_DECLARED: dict[str, dict[str, pa.DataType]] = {
    "runs": {f.name: f.type for f in RUN_COLUMNS},
    "attempts": {f.name: f.type for f in RUN_COLUMNS},
    "curves": {f.name: f.type for f in CURVE_COLUMNS},
    "attempt_curves": {f.name: f.type for f in ATTEMPT_CURVE_COLUMNS},
    "members": {f.name: f.type for f in MEMBER_SCHEMA},
    "trials": {f.name: f.type for f in TRIAL_SCHEMA},
}


def foreign_columns(rel: str, schema: pa.Schema) -> str | None:
    """What makes a part at `rel` not a part of its folder (a missing column, a declared column of
    another type), or None."""
    kind = rel.split("/", 1)[0]
    if kind not in _REQUIRED:
        return None
    missing = [c for c in _REQUIRED[kind] if c not in schema.names]
    if missing:
        return f"not a {kind} part: no column {', '.join(missing)}"
    for name, declared in _DECLARED[kind].items():
        index = schema.get_field_index(name)
        if index < 0:
            continue
        have = schema.field(index).type
        same = have in _STRING if declared in _STRING else have.equals(declared)
        if not same and not (pa.types.is_integer(declared) and pa.types.is_integer(have)):
            return f"not a {kind} part: column {name} is {have}, not {declared}"
    return None
