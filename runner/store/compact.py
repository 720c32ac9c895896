"""`convgrid compact`: merge many small part files into one per partition without changing what
readers see (the newest row per run, the curves of those rows, unique memberships).

New parts are written (atomically) before old ones are deleted, and only the files read are deleted,
so a reader or a driver writing at the same time never loses a result: at worst a reader briefly
sees duplicates, which it drops anyway.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds

from runner.store.columns import MEMBER_SCHEMA, TRIAL_SCHEMA
from runner.store.store import ResultStore, latest_per_run
from runner.store.trials import read_trials


@dataclass
class CompactReport:
    files_before: int = 0
    files_after: int = 0
    rows_dropped: int = 0

    def line(self) -> str:
        return (
            f"compacted {self.files_before} part files into {self.files_after}; "
            f"dropped {self.rows_dropped} superseded rows"
        )


def _read(store: ResultStore, files: list[str], schema: pa.Schema) -> pa.Table:
    return ds.dataset(files, filesystem=store.fs, format="parquet", schema=schema).to_table()


def _replace(store: ResultStore, files: list[str], table: pa.Table, *parts: str, report: CompactReport) -> None:
    report.files_before += len(files)
    if len(files) <= 1:
        report.files_after += len(files)
        return
    if table.num_rows:
        store.write_part(table, *parts)
        report.files_after += 1
    for path in files:
        store.fs.delete_file(path)


def compact(store: ResultStore) -> CompactReport:
    report = CompactReport()
    for name in store.tasks():
        runs_schema, curves_schema = store.file_schema("runs", name), store.file_schema("curves", name)
        run_files = store.part_files("runs", f"task={name}")
        curve_files = store.part_files("curves", f"task={name}")
        runs_all = _read(store, run_files, runs_schema)
        runs = latest_per_run(runs_all)
        report.rows_dropped += runs_all.num_rows - runs.num_rows
        curves = _read(store, curve_files, curves_schema) if curve_files else curves_schema.empty_table()
        keys = runs.select(["run_id", "batch_id"])
        kept = curves.join(keys, keys=["run_id", "batch_id"], join_type="inner").select(curves.schema.names)
        kept = kept.sort_by([("run_id", "ascending"), ("step", "ascending")])
        report.rows_dropped += curves.num_rows - kept.num_rows
        # curves before runs, as in every write: a run never points at curves that are not there yet
        _replace(store, curve_files, kept.cast(curves_schema), "curves", f"task={name}", report=report)
        _replace(store, run_files, runs.sort_by("run_id"), "runs", f"task={name}", report=report)
    trial_files = store.part_files("trials")
    if trial_files:
        trials = read_trials(store)  # newest row per (storage, study, number)
        report.rows_dropped += _read(store, trial_files, TRIAL_SCHEMA).num_rows - trials.num_rows
        _replace(store, trial_files, trials, "trials", report=report)
    member_files = store.part_files("members")
    if member_files:
        members = _read(store, member_files, MEMBER_SCHEMA).sort_by("added")
        frame = members.to_pandas().drop_duplicates(["grid", "run_id"], keep="first")
        unique = pa.Table.from_pandas(frame, schema=MEMBER_SCHEMA, preserve_index=False)
        report.rows_dropped += members.num_rows - unique.num_rows
        _replace(store, member_files, unique, "members", report=report)
    return report
