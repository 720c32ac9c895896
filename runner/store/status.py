"""`convgrid status`: what is done, failed, diverged, pruned or missing, per task and per grid."""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from runner.store.claims import DriverInfo, live_claims
from runner.store.parts import DamagedPartWarning
from runner.store.store import TASK_KINDS, ResultStore, task_dir
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
    Counted by Arrow's group-by and join on the columns read: no Python object per run (a million
    runs as dicts, tuples and sets of strings were more than a gigabyte)."""
    damaged = damaged_parts(store) if verify else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DamagedPartWarning)
        runs = store.read_runs(columns=["task", "status", "error"])
        members = store.read_members().select(["grid", "task", "run_id"])
    report = StatusReport()
    report.by_task = _counts(runs.group_by(["task", "status"]).aggregate([([], "count_all")]), ["task"])
    with_error = pc.fill_null(pc.greater(pc.utf8_length(runs["error"]), 0), False)
    failed = runs.filter(pc.and_(pc.is_in(runs["status"], pa.array(sorted(RETRY_ON_REQUEST))), with_error))
    for task, rid, error in zip(*(failed[c].to_pylist() for c in ("task", "run_id", "error")), strict=True):
        report.errors.append((task, rid, (error.strip().splitlines() or [""])[0]))
    # each (grid, run) once, with the task of its first members row; a run not stored is "missing"
    asked = members.group_by(["grid", "run_id"], use_threads=False).aggregate([("task", "first")])
    joined = asked.join(runs.select(["run_id", "status"]), "run_id", join_type="left outer")
    joined = joined.set_column(
        joined.schema.get_field_index("status"), "status", pc.fill_null(joined["status"], "missing")
    )
    counted = joined.group_by(["grid", "task_first", "status"]).aggregate([([], "count_all")])
    report.by_grid = _counts(counted, ["grid"])
    report.by_grid_task = {
        (grid, task): counts for (grid, task), counts in _counts(counted, ["grid", "task_first"]).items()
    }
    report.damaged = damaged
    report.drivers = live_claims(store.files)
    return report


def _counts(table: pa.Table, keys: list[str]) -> dict[Any, Counter[str]]:
    """{key: Counter(status -> count)} from a (keys..., status, count_all) table: one key column gives
    plain keys, several give tuples."""
    out: dict[Any, Counter[str]] = defaultdict(Counter)
    columns = [table[k].to_pylist() for k in keys]
    for *key, status, count in zip(*columns, table["status"].to_pylist(), table["count_all"].to_pylist(), strict=True):
        out[key[0] if len(keys) == 1 else tuple(key)][status] += count
    return dict(out)
