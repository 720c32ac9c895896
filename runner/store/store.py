"""The Parquet result store.

Layout under the root (a local path or any pyarrow filesystem URI such as s3://bucket/prefix):

    runs/task=<name>/part-*.parquet     one row per run attempt (the newest row of a run_id wins)
    curves/task=<name>/part-*.parquet   one row per (run_id, step); tied to its runs row by batch_id
    members/part-*.parquet              which grid or study asked for which run_id

A part file is written under a dot-prefixed temporary name and renamed into place (pyarrow.dataset
ignores dot files), so readers never see half a file; on an object store the completed upload is the
atomic step. Curves are written before their runs row: a run is finished only once its runs part is
in place, and curves whose batch_id no runs row points to are orphans readers skip. Two drivers on one
root cannot corrupt it: every part has a unique name, and readers drop duplicates keeping the newest.

The store knows data, not code: it writes the schemas its caller hands it (built from the task by
runner.grid.schema) and reads each task's schema back from the files, which carry it; a store holding
runs of a task that is not installed here reads like any other.
"""

from __future__ import annotations

import os
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.store.columns import CURVE_COLUMNS, MEMBER_SCHEMA, RUN_COLUMNS
from runner.store.records import RunRecord
from tasks.status import FINAL_STATUSES

STATUS_COLUMNS = ["run_id", "task", "status", "error", "finished", "batch_id"]

# task name -> (runs schema, curves schema): how a writer tells the store the columns of a task.
SchemaFor = Callable[[str], tuple[pa.Schema, pa.Schema]]


def open_root(root: str | os.PathLike[str]) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and base path for a local path or a URI (s3://, gs://, file://)."""
    text = str(root)
    if "://" in text:
        return pafs.FileSystem.from_uri(text)
    return pafs.LocalFileSystem(), str(Path(text).resolve())


class ResultStore:
    def __init__(self, root: str | os.PathLike[str], filesystem: pafs.FileSystem | None = None) -> None:
        self.root = str(root)
        if filesystem is not None:
            self.fs, self.base = filesystem, str(root)
        else:
            self.fs, self.base = open_root(root)
        self.local = isinstance(self.fs, pafs.LocalFileSystem)

    # ---- paths ---------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.base.rstrip("/"), *parts])

    def _exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def tasks(self) -> list[str]:
        """Tasks with at least one runs part."""
        if not self._exists(self.path("runs")):
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(self.path("runs")))
        return sorted(
            i.base_name.split("=", 1)[1] for i in infos if i.type == pafs.FileType.Directory and "=" in i.base_name
        )

    # ---- writing -------------------------------------------------------------------------------
    def write_part(self, table: pa.Table, *parts: str) -> str:
        """Write `table` as a new part file under parts; atomic for readers. Returns its path."""
        directory = self.path(*parts)
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.parquet"
        final = f"{directory}/{name}"
        self.fs.create_dir(directory, recursive=True)
        if self.local:
            tmp = f"{directory}/.tmp-{name}"
            pq.write_table(table, tmp, filesystem=self.fs)
            self.fs.move(tmp, final)  # rename within one directory: atomic on POSIX
        else:
            pq.write_table(table, final, filesystem=self.fs)  # object stores publish on completion
        return final

    def write_records(self, records: Sequence[RunRecord], schemas: SchemaFor) -> None:
        """Persist finished runs: per task, curves part first, then the runs part that makes them count."""
        by_task: dict[str, list[RunRecord]] = defaultdict(list)
        for rec in records:
            by_task[rec.task].append(rec)
        for name, recs in by_task.items():
            runs_schema, schema = schemas(name)
            batch_id = uuid.uuid4().hex
            curve_cols: dict[str, list[object]] = defaultdict(list)
            for rec in recs:
                n = len(rec.curve.get("step", []))
                curve_cols["run_id"].extend([rec.run_id] * n)
                curve_cols["batch_id"].extend([batch_id] * n)
                for col in schema.names[2:]:
                    curve_cols[col].extend(rec.curve.get(col, [None] * n))
            if curve_cols["run_id"]:
                self.write_part(pa.Table.from_pydict(dict(curve_cols), schema=schema), "curves", f"task={name}")
            rows = [{**rec.row, "batch_id": batch_id} for rec in recs]
            self.write_part(pa.Table.from_pylist(rows, schema=runs_schema), "runs", f"task={name}")

    def write_members(self, rows: Iterable[dict[str, object]]) -> int:
        """Add membership rows not already present; returns how many were new."""
        rows = list(rows)
        if not rows:
            return 0
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
    def part_files(self, *parts: str) -> list[str]:
        """The published part files under parts (temporary and hidden files excluded), oldest first."""
        directory = self.path(*parts)
        if not self._exists(directory):
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(directory))
        return sorted(i.path for i in infos if i.type == pafs.FileType.File and i.base_name.startswith("part-"))

    def file_schema(self, kind: str, task: str) -> pa.Schema:
        """The schema of a task's runs or curves as its files say: the union of every part's columns
        (a later code version may have added some), with the task and version metadata they carry."""
        files = self.part_files(kind, f"task={task}")
        fixed = RUN_COLUMNS if kind == "runs" else CURVE_COLUMNS
        if not files:
            return pa.schema(fixed)
        schemas = [pq.read_schema(f, filesystem=self.fs) for f in files]
        return pa.unify_schemas(schemas[::-1])  # newest first: its metadata (version) wins

    def _dataset(self, *parts: str, schema: pa.Schema | None = None) -> ds.Dataset | None:
        path = self.path(*parts)
        if not self._exists(path):
            return None
        return ds.dataset(path, filesystem=self.fs, format="parquet", partitioning="hive", schema=schema)

    def read_members(self) -> pa.Table:
        dataset = self._dataset("members", schema=MEMBER_SCHEMA)
        return dataset.to_table() if dataset is not None else MEMBER_SCHEMA.empty_table()

    def read_runs(self, task: str | None = None, columns: list[str] | None = None) -> pa.Table:
        """The newest row of every run_id (optionally of one task), with the columns asked for.

        Without a task, tasks are read one by one and only columns common to all tasks may be asked
        for (default: STATUS_COLUMNS).
        """
        if task is None:
            cols = list(dict.fromkeys(["run_id", "finished", *(columns or STATUS_COLUMNS)]))
            parts = [self.read_runs(t, cols) for t in self.tasks()]
            if not parts:
                fixed = {f.name: f for f in RUN_COLUMNS}
                return pa.schema([fixed[c] for c in cols]).empty_table()
            return pa.concat_tables(parts)
        schema = self.file_schema("runs", task)
        cols = list(dict.fromkeys(["run_id", "finished", *(columns or schema.names)]))
        # A column no file has yet (a metric of runs not stored, or of a newer task version) reads as
        # nulls rather than failing: the files are the truth, and they say nothing of it.
        schema = pa.unify_schemas([schema, pa.schema([pa.field(c, pa.null()) for c in cols if c not in schema.names])])
        dataset = self._dataset("runs", f"task={task}", schema=schema)
        if dataset is None:
            return schema.empty_table().select(cols)
        return latest_per_run(dataset.to_table(columns=cols))

    def done_ids(self, task: str | None = None) -> set[str]:
        """Run ids whose newest row is final (ok or diverged): these are never run again."""
        table = self.read_runs(task, columns=["status"])
        mask = pc.is_in(table["status"], value_set=pa.array(sorted(FINAL_STATUSES)))
        return set(table.filter(mask)["run_id"].to_pylist())

    def read_curves(self, task: str, run_ids: Iterable[str] | None = None) -> pa.Table:
        """Curve rows belonging to the newest runs row of each run (orphans and stale attempts skipped)."""
        runs = self.read_runs(task, columns=["batch_id"])
        schema = self.file_schema("curves", task)
        dataset = self._dataset("curves", f"task={task}", schema=schema)
        if dataset is None:
            return schema.empty_table()
        keys = runs.select(["run_id", "batch_id"])
        if run_ids is not None:
            keys = keys.filter(pc.is_in(keys["run_id"], value_set=pa.array(list(run_ids), pa.string())))
        expr = pc.field("run_id").isin(keys["run_id"]) & pc.field("batch_id").isin(keys["batch_id"])
        table = dataset.to_table(filter=expr)
        joined = table.join(keys, keys=["run_id", "batch_id"], join_type="inner")
        return joined.select(table.schema.names).sort_by([("run_id", "ascending"), ("step", "ascending")])


def latest_per_run(table: pa.Table) -> pa.Table:
    """Keep the newest row (by `finished`) of each run_id; duplicates come from retries or two drivers."""
    if table.num_rows == 0:
        return table
    table = table.sort_by([("run_id", "ascending"), ("finished", "descending")])
    ids = table["run_id"]
    keep = pc.not_equal(ids.slice(1), ids.slice(0, len(ids) - 1))
    first = pa.concat_arrays([pa.array([True]), keep.combine_chunks()])
    return table.filter(first)
