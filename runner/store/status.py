"""`convgrid status`: what is done, failed, diverged, pruned or missing, per task and per grid."""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from runner.store.claims import DriverInfo, live_claims
from runner.store.index import NewestRows, newest_rows, per_part
from runner.store.index_keys import any_keys
from runner.store.parts import DamagedPartWarning
from runner.store.store import RUNS, TASK_KINDS, ResultStore, task_dir
from tasks.status import ALL_STATUSES, RETRY_ON_REQUEST

COLUMNS = (*ALL_STATUSES, "missing")


@dataclass
class StatusReport:
    by_task: dict[str, Counter[str]] = field(default_factory=dict)
    by_grid: dict[str, Counter[str]] = field(default_factory=dict)
    by_grid_task: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (task, run_id, first line)
    damaged: dict[str, str] = field(default_factory=dict)  # part path -> why it cannot be read
    drivers: list[tuple[str, DriverInfo, int, float]] = field(default_factory=list)  # claims.live_claims

    def format(self, max_errors: int = 10) -> str:
        lines = []
        for title, table in (("task", self.by_task), ("grid/study", self.by_grid)):
            if not table:
                continue
            width = max(len(title), *(len(k) for k in table))
            lines.append(f"{title:<{width}}  " + "  ".join(f"{c:>8}" for c in COLUMNS))
            for key in sorted(table):
                lines.append(f"{key:<{width}}  " + "  ".join(f"{table[key][c]:>8}" for c in COLUMNS))
            lines.append("")
        if self.errors:
            lines.append(f"failures ({len(self.errors)}; first lines):")
            for task, rid, err in self.errors[:max_errors]:
                lines.append(f"  {task} {rid[:12]}: {err}")
            if len(self.errors) > max_errors:
                lines.append(f"  ... {len(self.errors) - max_errors} more")
        if self.damaged:
            lines.append(
                f"damaged parts ({len(self.damaged)}; skipped by every reader, `convgrid compact --repair` moves them):"
            )
            lines.extend(f"  {path}: {why}" for path, why in sorted(self.damaged.items()))
        if self.drivers:
            lines.append(f"drivers sharing grids ({len(self.drivers)}; a live one beats every lease/4 seconds):")
            for key, info, held, age in self.drivers:
                finished = len(info.done)
                lines.append(
                    f"  grid {key} driver {info.driver} (host {info.host}, pid {info.pid}): "
                    f"{held} blocks claimed, {finished} finished, last heartbeat {age:.0f}s ago"
                )
        return "\n".join(lines).rstrip() or "the store is empty"


def damaged_parts(store: ResultStore) -> dict[str, str]:
    """Every visible part that cannot be read to its last page (checksums verified): path -> error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedPartWarning)  # listed in the report instead
        for directory in [*(task_dir(k, t) for t in store.tasks() for k in TASK_KINDS), "members", "trials"]:
            for part in store.parts(directory):
                try:
                    store.reader.verify(part)
                except FileNotFoundError:
                    continue  # replaced by a transaction meanwhile: its successor is listed next time
    return {store.files.abs(rel): why for rel, why in store.reader.damaged.items()}


def store_status(store: ResultStore, verify: bool = True) -> StatusReport:
    """Counts per task and grid; with `verify`, every part is read once to list the damaged ones.
    Counted over 64-bit keys of the run ids (runner.store.index_keys): each runs and members part is
    streamed into keys and small integer codes, 20 bytes a row, and matched by sorting and searching
    (numpy), never as one table of strings. (A million runs read as Arrow tables and joined on their
    ids peaked at ~700 MB; as Python objects, over a gigabyte.)"""
    damaged = damaged_parts(store) if verify else {}
    report = StatusReport()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedPartWarning)
        newest = {task: store.retrying(partial(newest_rows, store, task, True)) for task in store.tasks()}
        grids, tasks, member_keys, member_tasks, member_grids = store.retrying(partial(_members, store))
        report.errors = store.retrying(partial(_errors, store, newest))
    names: list[str | None] = [None]  # status code c is names[c + 1]: code -1 (a null status) is None
    keys, codes = [np.empty(0, dtype=np.uint64)], [np.empty(0, dtype=np.int16)]
    for task, rows in newest.items():
        to_global = np.array([_index(names, n) - 1 for n in rows.names] + [-1], dtype=np.int16)
        task_codes = to_global[rows.codes]  # -1 stays -1 (the lookup's last entry)
        report.by_task[task] = _count(task_codes, names)
        keys.append(rows.keys)
        codes.append(task_codes)
    # each (grid, run) once, with the task of its first members row; a run not stored is "missing"
    stored, stored_codes = np.concatenate(keys), np.concatenate(codes)
    order = np.argsort(stored, kind="stable")
    stored, stored_codes = stored[order], stored_codes[order]
    missing = _index(names, "missing") - 1
    status = np.full(len(member_keys), missing, dtype=np.int16)
    if len(stored):
        at = np.searchsorted(stored, member_keys).clip(max=len(stored) - 1)
        found = stored[at] == member_keys
        status[found] = stored_codes[at[found]]
    combo = (member_grids.astype(np.int64) * (len(tasks) + 1) + member_tasks) * (len(names) + 1) + status + 1
    values, counts = np.unique(combo, return_counts=True)
    by_grid: dict[str, Counter[str]] = defaultdict(Counter)
    by_grid_task: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        rest, code = divmod(value, len(names) + 1)
        grid, task = divmod(rest, len(tasks) + 1)
        name = names[code]  # code is status + 1, so names[code] is that status's name
        by_grid[grids[grid]][name] += count  # a null status counts under None
        by_grid_task[(grids[grid], tasks[task])][name] += count
    report.by_grid, report.by_grid_task = dict(by_grid), dict(by_grid_task)
    report.damaged = damaged
    report.drivers = live_claims(store.files)
    return report


def _index(names: list[Any], name: Any) -> int:
    """Where `name` is in `names`, appended if absent."""
    if name not in names:
        names.append(name)
    return names.index(name)


def _count(codes: np.ndarray, names: list[str | None]) -> Counter[str]:
    counts = np.bincount(codes.astype(np.int64) + 1, minlength=len(names))
    return Counter({names[c]: int(n) for c, n in enumerate(counts.tolist()) if n})  # type: ignore[misc]


def _members(store: ResultStore) -> tuple[list[str], list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(grid names, task names, keys, task codes, grid codes) of each distinct (grid, run) of members/,
    the task that of its first row in read order; streamed from the parts, 16 bytes a row."""
    grids: list[str] = []
    tasks: list[str] = []

    def rows(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = batch.num_rows
        task = batch.column("task") if "task" in batch.schema.names else pa.nulls(n, pa.string())
        return (
            any_keys(batch.column("run_id")),
            _codes(task, tasks),
            _codes(batch.column("grid"), grids),
        )

    keys: list[np.ndarray] = [np.empty(0, dtype=np.uint64)]
    task_codes: list[np.ndarray] = [np.empty(0, dtype=np.int32)]
    grid_codes: list[np.ndarray] = [np.empty(0, dtype=np.int32)]
    for part in per_part(store, store.parts("members"), ["grid", "task", "run_id"], rows):
        for k, t, g in part:
            keys.append(k)
            task_codes.append(t)
            grid_codes.append(g)
    key, task_code, grid_code = np.concatenate(keys), np.concatenate(task_codes), np.concatenate(grid_codes)
    order = np.lexsort((np.arange(len(key)), key, grid_code))  # by grid, then run, then read order
    key, task_code, grid_code = key[order], task_code[order], grid_code[order]
    first = np.ones(len(key), dtype=bool)
    first[1:] = (key[1:] != key[:-1]) | (grid_code[1:] != grid_code[:-1])
    return grids, tasks, key[first], task_code[first], grid_code[first]


def _codes(column: pa.Array, names: list[str]) -> np.ndarray:
    """Codes of a string column's values into `names` (which grows); a null as the code of ''."""
    encoded = pc.fill_null(column.cast(pa.string()), "").dictionary_encode()
    lookup = np.array([_index(names, n) for n in encoded.dictionary.to_pylist()], dtype=np.int32)
    return lookup[encoded.indices.to_numpy(zero_copy_only=False)]


def _errors(store: ResultStore, newest: dict[str, NewestRows]) -> list[tuple[str, str, str]]:
    """(task, run id, first line of its error) of each run whose newest row failed or timed out with an
    error, in run id order: only such rows are read (a filter on status), then matched to the newest."""
    wanted = pc.field("status").isin(sorted(RETRY_ON_REQUEST)) & (pc.utf8_length(pc.field("error")) > 0)
    out: list[tuple[str, str, str]] = []
    for task, rows in newest.items():
        table = store.read_table(RUNS, task, ["run_id", "finished", "error"], wanted)
        if not table.num_rows or not len(rows.keys):
            continue
        keys = np.concatenate([np.empty(0, dtype=np.uint64), *(any_keys(c) for c in table["run_id"].chunks)])
        micros = pc.cast(pc.cast(table["finished"], pa.timestamp("us", "UTC")), pa.int64())
        when = np.asarray(pc.fill_null(pc.cast(micros, pa.float64()), -np.inf).to_numpy(zero_copy_only=False))
        at = np.searchsorted(rows.keys, keys).clip(max=len(rows.keys) - 1)
        newest_failed = np.isin(np.array(rows.names + [""], dtype=object)[rows.codes[at]], sorted(RETRY_ON_REQUEST))
        keep = (rows.keys[at] == keys) & (rows.finished[at] == when) & newest_failed
        seen: set[int] = set()
        for i in np.flatnonzero(keep).tolist():  # a run's first such row in read order, as the newest is
            if int(keys[i]) not in seen:
                seen.add(int(keys[i]))
                first_line = (table["error"][i].as_py().strip().splitlines() or [""])[0]
                out.append((task, table["run_id"][i].as_py(), first_line))
    return sorted(out, key=lambda e: e[1])


def _counts(table: pa.Table, keys: list[str]) -> dict[Any, Counter[str]]:
    """{key: Counter(status -> count)} from a (keys..., status, count_all) table: one key column gives
    plain keys, several give tuples."""
    out: dict[Any, Counter[str]] = defaultdict(Counter)
    columns = [table[k].to_pylist() for k in keys]
    for *key, status, count in zip(*columns, table["status"].to_pylist(), table["count_all"].to_pylist(), strict=True):
        out[key[0] if len(keys) == 1 else tuple(key)][status] += count
    return dict(out)
