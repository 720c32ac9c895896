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

from runner.coord.claims import live_claims
from runner.coord.liveness import DriverInfo
from runner.errors import printable
from runner.settings import settings
from runner.store.checkpoints import CheckpointStore, Held
from runner.store.index import lookup, newest_of, order_values, spill_from, spill_runs, stream_parts
from runner.store.index_keys import any_keys
from runner.store.layout import ATTEMPTS, LOGS, RUNS, TASK_KINDS, task_dir
from runner.store.logs import logged_runs
from runner.store.parts import DamagedPartWarning
from runner.store.seqs import checked_max
from runner.store.spill import KeySpill, matched
from runner.store.store import ResultStore
from runner.store.union_check import union_problems
from tasks.status import ALL_STATUSES, DIVERGED, RETRY_ON_REQUEST, TIMEOUT

COLUMNS = (*ALL_STATUSES, "missing")


@dataclass
class StatusReport:
    by_task: dict[str, Counter[str]] = field(default_factory=dict)
    by_grid: dict[str, Counter[str]] = field(default_factory=dict)
    by_grid_task: dict[tuple[str, str], Counter[str]] = field(default_factory=dict)
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (task, run_id, first line)
    damaged: dict[str, str] = field(default_factory=dict)  # part path -> why it cannot be read
    drivers: list[tuple[str, DriverInfo, int, float]] = field(default_factory=list)  # claims.live_claims
    logged: set[str] = field(default_factory=set)  # run ids with a stored log (runner.store.logs)
    diverged_logged: list[tuple[str, str]] = field(default_factory=list)  # (task, run_id): diverged, with a log
    unions: dict[str, str] = field(default_factory=dict)  # folder -> what is wrong with its union part
    checkpoints: list[Held] = field(default_factory=list)  # runner.store.checkpoints: files held

    def format(self, max_errors: int = 10) -> str:
        lines = []
        for title, table in (("task", self.by_task), ("grid/study", self.by_grid)):
            if not table:
                continue
            width = max(len(title), *(len(k) for k in table))
            lines.append(f"{title:<{width}}  " + "  ".join(f"{c:>8}" for c in COLUMNS))
            for key in sorted(table):
                name = printable(key)  # a newline inside a name stays inside its row
                lines.append(f"{name:<{width}}  " + "  ".join(f"{table[key][c]:>8}" for c in COLUMNS))
            lines.append("")
        if self.errors:
            lines.append(f"failures ({len(self.errors)}; first lines):")
            for task, rid, err in self.errors[:max_errors]:
                lines.append(
                    f"  {task} {rid[:12]}: {err}" + (f"  [convgrid logs {rid[:12]}]" if rid in self.logged else "")
                )
            if len(self.errors) > max_errors:
                lines.append(f"  ... {len(self.errors) - max_errors} more")
        if self.diverged_logged:
            lines.append(f"diverged runs that wrote output ({len(self.diverged_logged)}; `convgrid logs RUN_ID`):")
            lines.extend(f"  {task} {rid[:12]}" for task, rid in self.diverged_logged[:max_errors])
            if len(self.diverged_logged) > max_errors:
                lines.append(f"  ... {len(self.diverged_logged) - max_errors} more")
        if self.damaged:
            lines.append(
                f"damaged parts ({len(self.damaged)}; skipped by every reader, `convgrid compact --repair` moves them):"
            )
            lines.extend(f"  {path}: {why}" for path, why in sorted(self.damaged.items()))
        if self.unions:
            lines.append("union schema parts plain Parquet clients must not trust (`convgrid compact` rebuilds them):")
            lines.extend(f"  {kind}/task=_schema: {why}" for kind, why in sorted(self.unions.items()))
        if self.drivers:
            lines.append(f"drivers sharing grids ({len(self.drivers)}; a live one beats every lease/4 seconds):")
            for key, info, held, age in self.drivers:
                finished = len(info.done)
                lines.append(
                    f"  grid {key} driver {info.driver} (host {info.host}, pid {info.pid}): "
                    f"{held} blocks claimed, {finished} finished, last heartbeat {age:.0f}s ago"
                )
        if self.checkpoints:
            lines.extend(["", *checkpoint_lines(self.checkpoints)])
        # names come from the store's files: a newline or an escape sequence in one is shown, not obeyed
        return printable("\n".join(lines).rstrip(), keep="\n") or "the store is empty"


def damaged_parts(store: ResultStore) -> dict[str, str]:
    """Every visible part that cannot be read to its last page (checksums verified): path -> error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedPartWarning)  # listed in the report instead
        for task in store.tasks():  # a commit_seq the store cannot have committed (runner.store.seqs)
            checked_max(store.reader, store.parts(task_dir(ATTEMPTS, task)), store.parts(task_dir(RUNS, task)))
        for directory in [*(task_dir(k, t) for t in store.tasks() for k in TASK_KINDS), "members", "trials", LOGS]:
            for part in store.parts(directory):
                try:
                    store.reader.verify(part)
                except FileNotFoundError:
                    continue  # replaced by a transaction meanwhile: its successor is listed next time
    return {store.files.abs(rel): why for rel, why in store.reader.damaged.items()}


def store_status(store: ResultStore, verify: bool = True) -> StatusReport:
    """Counts per task and grid; with `verify`, every part is read once to list the damaged ones.
    Counted over 64-bit keys of the run ids (runner.store.index_keys): the runs and members parts are
    streamed into KeySpills (20 and 16 bytes a row) and matched range of keys by range
    (runner.store.spill), so a store of any size is counted in the memory of one range. (A million runs
    read as Arrow tables and joined on their ids peaked at ~700 MB; as Python objects, over a gigabyte.)"""
    damaged = damaged_parts(store) if verify else {}
    report = StatusReport()
    tasks = store.tasks()
    names: list[str] = []  # status names, as the runs spill codes them
    grids: list[str] = []
    member_tasks: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedPartWarning)
        failures = [store.retrying(partial(_failures, store, task)) for task in tasks]
        with (
            spill_runs(store, tasks, names, every_id=True) as runs,
            store.retrying(partial(_members, store, grids, member_tasks)) as members,
        ):
            labels: list[str | None] = [*names, None, "missing"]  # a null status is None
            null, missing = len(names), len(names) + 1
            by_task = np.zeros((len(tasks), len(labels)), dtype=np.int64)
            combos: Counter[int] = Counter()
            retry_codes = np.array([n in RETRY_ON_REQUEST for n in names] + [False])
            for run_rows, member_rows in matched(runs, members):
                newest = newest_of(run_rows)
                codes = np.where(newest["code"] < 0, null, newest["code"]).astype(np.int64)
                np.add.at(by_task, (newest["task"].astype(np.int64), codes), 1)
                for failed in failures:
                    failed.match(newest, retry_codes)
                firsts = _first_per_grid(member_rows)
                at, found = lookup(newest["key"], firsts["key"])
                status = np.where(found, codes[at] if len(codes) else missing, missing)
                combo = (firsts["grid"].astype(np.int64) * len(member_tasks) + firsts["task"]) * len(labels) + status
                values, counts = np.unique(combo, return_counts=True)
                combos.update(dict(zip(values.tolist(), counts.tolist(), strict=True)))
    for number, task in enumerate(tasks):
        report.by_task[task] = Counter(
            {labels[c]: int(n) for c, n in enumerate(by_task[number].tolist()) if n}  # type: ignore[misc]
        )
    by_grid: dict[str, Counter[str]] = defaultdict(Counter)
    by_grid_task: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for value, count in sorted(combos.items()):
        rest, code = divmod(value, len(labels))
        g, t = divmod(rest, len(member_tasks))
        by_grid[grids[g]][labels[code]] += count  # type: ignore[index]  # a null status counts under None
        by_grid_task[(grids[g], member_tasks[t])][labels[code]] += count  # type: ignore[index]
    report.by_grid, report.by_grid_task = dict(by_grid), dict(by_grid_task)
    report.errors = sorted((e for f in failures for e in f.errors()), key=lambda e: e[1])
    report.damaged = damaged
    report.unions = union_problems(store)
    report.drivers = live_claims(store.files, settings().lease_s)
    report.logged, report.diverged_logged = _logged(store, tasks)
    report.checkpoints = list(CheckpointStore(store.files).held())
    return report


def _logged(store: ResultStore, tasks: list[str]) -> tuple[set[str], list[tuple[str, str]]]:
    """The run ids with a stored log, and the diverged runs among them (runs/ read with a filter: few)."""
    logged = store.retrying(partial(logged_runs, store))
    if not logged:
        return logged, []
    diverged = []
    for task in tasks:
        table = store.read_table(RUNS, task, ["run_id"], pc.field("status") == DIVERGED)
        diverged += [(task, rid) for rid in sorted(table["run_id"].to_pylist()) if rid in logged]
    return logged, diverged


def checkpoint_lines(held: list[Held]) -> list[str]:
    """The checkpoints held, per task: of runs not yet committed (a run that was killed or preempted, or
    one running now) and final states kept for budgets that may grow, with their sizes."""
    lines = ["checkpoints held (`convgrid compact` removes those of committed runs):"]
    for task in sorted({h.task for h in held}):
        runs = [h for h in held if h.task == task and h.lineage is None]
        finals = [h for h in held if h.task == task and h.lineage is not None]
        lines.append(
            f"  {task}: {len({h.run_id for h in runs})} runs not committed ({len(runs)} files, "
            f"{_size(sum(h.size for h in runs))}); {len(finals)} final states ({_size(sum(h.size for h in finals))})"
        )
    return lines


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = n / 1024
    for unit in ("KB", "MB"):
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"


MEMBER_ROW = {"task": np.int32, "grid": np.int32}


def _members(store: ResultStore, grids: list[str], tasks: list[str]) -> KeySpill:
    """Every members row: (key, task code into `tasks`, grid code into `grids`), in read order."""

    def rows(batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = batch.num_rows
        task = batch.column("task") if "task" in batch.schema.names else pa.nulls(n, pa.string())
        return any_keys(batch.column("run_id")), _codes(task, tasks), _codes(batch.column("grid"), grids)

    def fill(spill: KeySpill) -> None:
        grids.clear()
        tasks.clear()
        for keys, task, grid in stream_parts(store, store.parts("members"), ["grid", "task", "run_id"], rows):
            spill.add(keys, task=task, grid=grid)

    return spill_from(store, MEMBER_ROW, fill)


def _first_per_grid(rows: np.ndarray) -> np.ndarray:
    """Each distinct (grid, run) of members rows once, with its first row's task (in read order)."""
    order = np.lexsort((np.arange(len(rows)), rows["key"], rows["grid"]))
    rows = rows[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = (rows["key"][1:] != rows["key"][:-1]) | (rows["grid"][1:] != rows["grid"][:-1])
    return rows[first]


def _codes(column: pa.Array, names: list[str]) -> np.ndarray:
    """Codes of a string column's values into `names` (which grows); a null as the code of ''."""
    encoded = pc.fill_null(column.cast(pa.string()), "").dictionary_encode()
    lookup_codes = np.array([_index(names, n) for n in encoded.dictionary.to_pylist()], dtype=np.int32)
    return lookup_codes[encoded.indices.to_numpy(zero_copy_only=False)]


def _index(names: list[Any], name: Any) -> int:
    """Where `name` is in `names`, appended if absent."""
    if name not in names:
        names.append(name)
    return names.index(name)


@dataclass
class _Failures:
    """A task's stored rows that failed with an error or timed out (read with a filter on status: few),
    and which of them are their run's newest row (found range by range, `match`)."""

    task: str
    number: int  # the task's place among the store's tasks, as the runs spill codes it
    table: pa.Table  # run_id, commit_seq, finished, status, error
    keys: np.ndarray
    seq: np.ndarray  # the rows' commit order (index.order_values)
    when: np.ndarray
    newest: np.ndarray  # whether each row is its run's newest (and so its status the run's)

    def match(self, newest: np.ndarray, retry_codes: np.ndarray) -> None:
        mine = newest[newest["task"] == self.number]
        at, found = lookup(mine["key"], self.keys)
        if len(mine):
            same_row = (mine["seq"][at] == self.seq) & (mine["finished"][at] == self.when)
            found &= same_row & retry_codes[mine["code"][at]]
        self.newest |= found

    def errors(self) -> list[tuple[str, str, str]]:
        """(task, run id, first line of its error): a run's first such row in read order, as the newest is."""
        out, seen = [], set()
        for i in np.flatnonzero(self.newest).tolist():
            if int(self.keys[i]) not in seen:
                seen.add(int(self.keys[i]))
                # a cooperative timeout of a store before its reason was written has no error
                error = self.table["error"][i].as_py() or self.table["status"][i].as_py()
                first_line = (error.strip().splitlines() or [""])[0]
                out.append((self.task, self.table["run_id"][i].as_py(), first_line))
        return out


def _failures(store: ResultStore, task: str) -> _Failures:
    with_reason = pc.utf8_length(pc.field("error")) > 0
    wanted = pc.field("status").isin(sorted(RETRY_ON_REQUEST)) & (with_reason | (pc.field("status") == TIMEOUT))
    table = store.read_table(RUNS, task, ["run_id", "commit_seq", "finished", "status", "error"], wanted)
    keys = np.concatenate([np.empty(0, dtype=np.uint64), *(any_keys(c) for c in table["run_id"].chunks)])
    seq, when = order_values(table)
    number = store.tasks().index(task)
    return _Failures(task, number, table, keys, seq, when, np.zeros(len(keys), dtype=bool))
