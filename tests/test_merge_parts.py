"""The bounded merge of small parts (runner.store.merge), what a run does to a fragmented store: every
reader sees the same before and after (superseded attempts included), large parts stay, groups keep
to the byte budget, damaged parts stay where they are with their rows, a kill between groups changes
nothing readers see, and a merged store is merged no further."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runner import ResultStore, run_grid
from runner.store import merge
from runner.store.columns import MEMBER_SCHEMA
from runner.store.merge import folders, merge_parts, plan_groups
from runner.store.status import store_status
from runner.store.trials import read_trials, write_trials
from runner.store.txn import TXN_DIR
from tests.conftest import REPO, done_ids, run_cell_by_cell
from tests.options import opts
from tests.test_store_faults import assert_same, logical, settled

GRID = {
    "name": "merge",
    "blocks": [
        {"task": "least_squares", "params": {"d_in": 4, "m": 8, "n_iters": 20}, "product": {"lr": [0.01, 0.02]}},
        {"task": "faulty", "product": {"x": [1.0, 2.0, 3.0]}},
        {"task": "faulty", "params": {"x": 5.0, "fail": True}},
    ],
}


def _trial(number: int, state: str, written: str) -> dict[str, object]:
    return {
        "study": "s",
        "storage": "journal",
        "number": number,
        "state": state,
        "task": "faulty",
        "params_json": "{}",
        "value": float(number),
        "written": pd.Timestamp(written, tz="UTC"),
    }


@pytest.fixture(scope="module")
def fragmented(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Many small parts with superseded rows: a part per run, a --retry-failed run (the failed run's
    older attempt superseded), an --only rerun of a finished run, members per cell, trials rewritten."""
    root = tmp_path_factory.mktemp("fragmented")
    one_by_one = opts(flush_every=1, batch=False)
    run_cell_by_cell(GRID, root, one_by_one)
    run_grid(GRID, root, one_by_one, retry_failed=True)
    store = ResultStore(root)
    run_grid(GRID, root, one_by_one, only=sorted(done_ids(store, "least_squares"))[:1])
    write_trials(store, [_trial(0, "FAIL", "2026-01-01"), _trial(1, "COMPLETE", "2026-01-01")])
    write_trials(store, [_trial(0, "COMPLETE", "2026-01-02")])  # trial 0's newer row
    write_trials(store, [_trial(2, "PRUNED", "2026-01-03")])
    assert all(len(store.parts(f)) >= 3 for f in ["runs/task=faulty", "curves/task=faulty", "members", "trials"])
    assert store.read_attempts("faulty").num_rows > store.read_runs("faulty").num_rows  # superseded attempts
    return root


def seen(root: Path) -> dict[str, pd.DataFrame]:
    """What convgrid's readers see (`logical`: runs, curves, attempts, members, trials) plus the
    superseded attempts' curves and the status counts."""
    store = ResultStore(root)
    out = logical(root)
    for task in store.tasks():
        old = store.read_curves(task, attempts="superseded").to_pandas()
        out[f"attempt_curves/{task}"] = old.sort_values(["run_id", "batch_id", "step"]).reset_index(drop=True)
    status = store_status(store, verify=False)
    counts = [
        (kind, key, col, n)
        for kind, table in (("task", status.by_task), ("grid", status.by_grid))
        for key, counter in table.items()
        for col, n in counter.items()
    ]
    out["status"] = pd.DataFrame(sorted(counts), columns=["kind", "key", "status", "n"])
    return out


def part_counts(root: Path) -> dict[str, int]:
    store = ResultStore(root)
    return {folder: len(store.parts(folder)) for folder in folders(store)}


def uncompressed(path: Path) -> int:
    meta = pq.read_metadata(path)
    return sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))


def copy(source: Path, tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(source, root)
    return root


def test_merging_changes_nothing_readers_see_and_a_merged_store_is_merged_no_further(
    fragmented: Path, tmp_path: Path
) -> None:
    root = copy(fragmented, tmp_path)
    before, counts = seen(root), part_counts(root)
    report = merge_parts(ResultStore(root), max_parts=1)
    merged = [folder for folder, n in counts.items() if n > 1]
    assert part_counts(root) == {folder: 1 if folder in merged else n for folder, n in counts.items()}
    assert (report.parts_in, report.parts_out) == (sum(counts[f] for f in merged), len(merged))
    assert report.line() == f"merged {report.parts_in} part files into {len(merged)}"
    assert_same(seen(root), before)
    settled(root)  # plain clients: one row per run in runs/, only kept curves in curves/
    assert read_trials(ResultStore(root))["state"].to_pylist() == ["COMPLETE", "COMPLETE", "PRUNED"]

    files = sorted(root.rglob("*.parquet"))
    again = merge_parts(ResultStore(root), max_parts=0)  # every folder over the threshold: nothing small pairs up
    assert (again.parts_in, again.parts_out) == (0, 0) and sorted(root.rglob("*.parquet")) == files


def test_plan_groups_keeps_large_parts_and_the_budget() -> None:
    sizes = [("a", 10), ("b", 30), ("c", 51), ("d", 25), ("e", 50), ("f", 40), ("g", 5), ("h", 100), ("i", 1)]
    # budget 100: c and h are large (over 50); a+b+d fill the first group (65 + 50 > 100), e+f+g the second
    assert plan_groups(sizes, 100) == [["a", "b", "d"], ["e", "f", "g", "i"]]
    assert plan_groups([("a", 60), ("b", 70)], 100) == []  # nothing small: nothing to merge
    assert plan_groups([("a", 10), ("b", 95), ("c", 10)], 100) == [["a", "c"]]


def _members(grid: str, n: int) -> pa.Table:
    ids = [hashlib.md5(f"{grid}/{i}".encode()).hexdigest() for i in range(n)]
    added = pa.repeat(pa.scalar(datetime(2026, 1, 1, tzinfo=UTC), pa.timestamp("us", tz="UTC")), n)
    columns = {"run_id": ids, "task": ["faulty"] * n, "grid": [grid] * n, "kind": ["grid"] * n, "source": [None] * n}
    return pa.table({**columns, "block": pa.array([0] * n, pa.int32()), "added": added}, schema=MEMBER_SCHEMA)


def test_groups_keep_to_the_budget_large_parts_stay_and_rows_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ResultStore(tmp_path)
    for i, n in enumerate([5, 5, 200, 5, 5, 5, 5, 5]):  # seven small parts and a large one
        store.write_part(_members(f"g{i}", n), "members")
    parts = store.parts("members")
    sizes = [(p, uncompressed(tmp_path / p)) for p in parts]
    small = max(s for p, s in sizes if p != parts[2])
    budget = 2 * small + 1  # two small parts fit, three do not; the 200-row part is over half of it
    monkeypatch.setattr(merge, "MERGE_ROWS", 2)  # rows go through two at a time,
    monkeypatch.setattr(merge, "ROW_GROUP_ROWS", 3)  # and are written in row groups of three or more
    before = store.read_members().to_pandas().sort_values("run_id", ignore_index=True)

    report = merge_parts(store, max_parts=1, budget=budget)
    after = store.parts("members")
    assert (report.parts_in, report.parts_out) == (6, 3)
    assert after[:2] == [parts[2], parts[7]]  # the large part and the small one left over stay as they were
    shapes = [pq.read_metadata(tmp_path / p) for p in after[2:]]
    assert [m.num_rows for m in shapes] == [10, 10, 10]
    # two parts of 5 rows read 2, 2, 1 rows at a time: row groups of 4, 3 and 3 rows
    assert [[m.row_group(i).num_rows for i in range(m.num_row_groups)] for m in shapes] == [[4, 3, 3]] * 3
    pd.testing.assert_frame_equal(store.read_members().to_pandas().sort_values("run_id", ignore_index=True), before)


def _flip_page_bytes(path: Path) -> bytes:
    """Flip the last bytes of the first column chunk's pages (its data, under their checksum: the
    footer still reads, a full read fails). Returns the original bytes."""
    data = path.read_bytes()
    chunk = pq.read_metadata(path).row_group(0).column(0)
    end = chunk.data_page_offset + chunk.total_compressed_size
    if chunk.has_dictionary_page:
        end = chunk.dictionary_page_offset + chunk.total_compressed_size
    path.write_bytes(data[: end - 4] + bytes(b ^ 0xFF for b in data[end - 4 : end]) + data[end:])
    return data


def test_damaged_parts_stay_in_place_with_their_rows(fragmented: Path, tmp_path: Path) -> None:
    root = copy(fragmented, tmp_path)
    before = seen(root)
    store = ResultStore(root)
    flipped = root / store.parts("curves/task=faulty")[1]  # found only when its rows are read
    truncated = root / store.parts("runs/task=faulty")[0]  # found by its footer
    originals = {flipped: _flip_page_bytes(flipped), truncated: truncated.read_bytes()}
    truncated.write_bytes(originals[truncated][:20])
    report = merge_parts(store, max_parts=1)
    assert report.line().endswith("; left 2 damaged parts in place (`convgrid compact --repair` moves them)")
    # each folder: the damaged part and one merged from the others
    assert len(store.parts("curves/task=faulty")) == 2 and len(store.parts("runs/task=faulty")) == 2
    for path, data in originals.items():  # the damage mended, every row is there, once
        assert path.exists()
        path.write_bytes(data)
    assert_same(seen(root), before)


KILLED_IN_SECOND_GROUP = """
import sys
from runner.store import ResultStore, merge
from tests.kill_at import install
first = merge._merge_group
calls = []
def kill_in_second(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:  # the first group is merged and done; the second dies at the phase asked
        install("merge:" + sys.argv[2])
    return first(*args, **kwargs)
merge._merge_group = kill_in_second
merge.merge_parts(ResultStore(sys.argv[1]), max_parts=1, budget=int(sys.argv[3]))
"""


def test_a_kill_between_groups_changes_nothing_readers_see(fragmented: Path, tmp_path: Path) -> None:
    """Killed with the first group merged and the second one committed, its old parts not yet deleted
    (the phase where convgrid's readers must honour the marker to see each row once)."""
    root = copy(fragmented, tmp_path)
    before, counts = seen(root), part_counts(root)
    budget = 3 * max(uncompressed(p) for p in root.glob("*/**/part-*.parquet"))  # no part large, several groups
    script = KILLED_IN_SECOND_GROUP
    killed = subprocess.run([sys.executable, "-c", script, str(root), "published", str(budget)], cwd=REPO)
    assert killed.returncode == -9 and list((root / TXN_DIR).glob("*.json"))  # died by SIGKILL, in a transaction
    assert_same(seen(root), before)  # readers, before anyone recovers
    assert sum(part_counts(root).values()) < sum(counts.values())  # the first group was merged
    merge_parts(ResultStore(root), max_parts=1)  # recovers first, then merges the rest
    settled(root)
    assert_same(seen(root), before)


def test_a_run_reports_what_it_merged(fragmented: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = copy(fragmented, tmp_path)
    monkeypatch.setenv("CONVGRID_COMPACT_PARTS", "2")
    grown = {**GRID, "blocks": [*GRID["blocks"], {"task": "faulty", "params": {"x": 9.0}}]}
    report = run_grid(grown, root, opts())
    assert report.compacted is not None and report.compacted.startswith("merged ")
    assert report.compacted in report.line()
    assert max(part_counts(root).values()) <= 2
    assert Counter(ResultStore(root).read_runs("faulty")["status"].to_pylist()) == Counter({"ok": 4, "failed": 1})
