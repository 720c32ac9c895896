"""Workers write, the driver commits (issue 27), at the store: staged curve parts published unread, the
same rows as the driver writing them itself, parts that cannot be published whole copied, lost parts
costing their runs a `failed` row, and the cleaning of what no manifest will name (runner.store.incoming,
runner.execute.staging.Stager)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from runner.errors import StoreWriteError
from runner.execute.base import WorkItem
from runner.execute.staging import Stager, StagingTarget, open_target
from runner.execute.unwritable import write_isolated
from runner.execute.worker import run_item
from runner.grid.schema import task_schemas
from runner.grid.spec import load_grid
from runner.store import ResultStore, RunRecord, incoming
from runner.store.compact import compact
from runner.store.flush import write_records
from runner.store.part_names import expected
from runner.store.txn import INCOMING_DIR, Marker, MarkerError
from tests.conftest import files_under
from tests.test_store_damage import content

GRID = {
    "name": "ingest",
    "blocks": [
        {"task": "least_squares", "params": {"d_in": 6, "m": 20, "n_iters": 40}, "product": {"lr": [0.01, 0.02, 0.05]}},
        {"task": "faulty", "product": {"x": [1.0, 2.0, 3.0]}},
        {"task": "faulty", "params": {"x": 9.0, "fail": True}},  # no curve: it goes unstaged
    ],
}


@pytest.fixture(scope="module")
def records() -> list[RunRecord]:
    """Real records of GRID's cells, run in this process."""
    return [run_item(WorkItem(c.run_id, c.task, c.params_json())) for c in load_grid(GRID).cells]


def stage(records: list[RunRecord], root: Path, rows: int, folder: str | None = None) -> list[RunRecord]:
    """The records as a worker staging to `root` sends them: parts of at least `rows` curve rows (a
    clock that never moves: only the size rule and the chunk's end cut parts)."""
    target = StagingTarget(str(root), folder or incoming.session_folder(), frozenset(), rows=rows, wait_s=1e9)
    stager = Stager(target, open_target(str(root)), clock=lambda: 0.0)
    sent = [r for record in records for r in stager.offer(record)]
    return sent + stager.drain()


def incoming_files(root: Path) -> list[Path]:
    return files_under(root / INCOMING_DIR)


def test_staged_curves_are_published_unread_and_store_what_the_driver_would(
    records: list[RunRecord], tmp_path: Path
) -> None:
    write_records(ResultStore(tmp_path / "driver"), records, task_schemas)
    sent = stage(records, tmp_path / "workers", rows=25)
    parts = {r.staged.path: r.staged for r in sent if r.staged is not None}
    assert len(parts) >= 3 and all(r.curve == {} for r in sent)  # no curve row travels in a record
    staged_files = {(e.size, e.footer_crc) for e in (expected(p.rsplit("/", 1)[-1]) for p in parts) if e}
    write_records(ResultStore(tmp_path / "workers"), sent, task_schemas)

    a, b = content(tmp_path / "driver"), content(tmp_path / "workers")
    assert a.keys() == b.keys()
    for key in a:
        pd.testing.assert_frame_equal(a[key], b[key], check_exact=True, obj=key)
    # the curve parts are the workers' files, moved (their names record the same size and checksum)
    published = {
        (e.size, e.footer_crc) for p in files_under(tmp_path / "workers" / "curves") if (e := expected(p.name))
    }
    assert staged_files <= published
    assert incoming_files(tmp_path / "workers") == []
    # a plain client reading curves/ sees each kept run's rows once
    raw = pd.read_parquet(tmp_path / "workers" / "curves" / "task=least_squares")
    assert len(raw) == len(b["curves/least_squares"]) and not raw.duplicated(["run_id", "step"]).any()


def test_a_part_holding_a_superseded_attempt_is_copied_not_published(records: list[RunRecord], tmp_path: Path) -> None:
    """Two records of one run in one flush: the later wins. The staged part that holds the earlier one
    cannot go to curves/ whole: the rows of its other run are copied, the part left for the cleaning."""
    squares = [r for r in records if r.task == "least_squares"][:2]
    sent = stage(squares, tmp_path, rows=10_000)
    (path,) = {r.staged.path for r in sent if r.staged is not None}
    again = run_item(WorkItem(squares[1].run_id, "least_squares", {**_params(squares[1])}))
    write_records(ResultStore(tmp_path), [*sent, again], task_schemas)

    store = ResultStore(tmp_path)
    runs = store.read_runs("least_squares").to_pandas().set_index("run_id")
    assert runs.loc[squares[1].run_id, "batch_id"] != sent[0].row["batch_id"]  # the later, inline record won
    raw = pd.read_parquet(tmp_path / "curves" / "task=least_squares")
    assert set(raw["run_id"]) == set(runs.index) and not raw.duplicated(["run_id", "step"]).any()
    assert len(raw) == runs["curve_rows"].sum()
    assert (tmp_path / path).exists()  # not published: the driver's discard (or the sweep) deletes it


def _params(record: RunRecord) -> dict[str, object]:
    import json

    return dict(json.loads(record.row["params_json"]))


@pytest.mark.parametrize("damage", ["deleted", "cut short"])
def test_a_lost_staged_part_ends_the_flush_with_a_message_and_stores_nothing_failed(
    records: list[RunRecord], tmp_path: Path, damage: str
) -> None:
    """A lost part is no run's fault (issue 44): stored as `failed` before, its runs were skipped by every
    later plan without --retry-failed. Now nothing of the flush is stored and its runs stay not done."""
    sent = stage(records, tmp_path, rows=25)
    victim = next(r.staged for r in sent if r.staged is not None)
    if damage == "deleted":
        (tmp_path / victim.path).unlink()
    else:
        (tmp_path / victim.path).write_bytes((tmp_path / victim.path).read_bytes()[:-100])
    with pytest.raises(StoreWriteError, match=f"could not store {len(sent)} finished runs.*staged curve part"):
        write_isolated(ResultStore(tmp_path), sent, task_schemas)
    assert not any(k.startswith("runs/") for k in content(tmp_path))  # nothing stored, failed or not


def test_the_driver_never_sees_a_staged_part_go_under_it(records: list[RunRecord], tmp_path: Path) -> None:
    """The check and the adoption happen under the writers' lock; a commit whose parts are all there
    publishes them all."""
    sent = stage(records, tmp_path, rows=1_000_000)
    assert len({r.staged.path for r in sent if r.staged is not None}) == 2  # one part per task
    write_records(ResultStore(tmp_path), sent, task_schemas)
    store = ResultStore(tmp_path)
    for task in ("least_squares", "faulty"):
        runs = store.read_runs(task)
        assert store.read_curves(task).num_rows == sum(runs["curve_rows"].to_pylist())


def test_a_marker_may_name_a_workers_part_but_nothing_outside_incoming() -> None:
    ok = Marker("t", adds=[(f"{INCOMING_DIR}/s.1.h/w1/part-1.parquet", "curves/task=x/part-1.parquet")])
    assert Marker.from_json(ok.to_json()).adds == ok.adds
    for staged in (f"{INCOMING_DIR}/part-1.parquet", f"{INCOMING_DIR}/../runs/part-1.parquet", "_store/lock"):
        bad = Marker("t", adds=[(staged, "curves/task=x/part-1.parquet")])
        with pytest.raises(MarkerError):
            Marker.from_json(bad.to_json())


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _session(root: Path, pid: int, host: str, age_s: float = 0.0) -> Path:
    folder = root / incoming.session_folder(pid, host) / "w1"
    folder.mkdir(parents=True)
    part = folder / "part-00000000000000000001-000000000001-10-00000000.parquet"
    part.write_bytes(b"0123456789")
    if age_s:
        then = time.time() - age_s
        os.utime(part, (then, then))
    return part


def test_the_sweep_takes_dead_local_drivers_sessions_and_old_parts_only(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    here = incoming.host_tag()
    dead = _session(tmp_path, _dead_pid(), here)
    live = _session(tmp_path, os.getpid(), here)
    elsewhere_young = _session(tmp_path, 1, "another-host")
    elsewhere_old = _session(tmp_path, 1, "a-third-host", age_s=incoming.STALE_INCOMING_S + 60)
    removed = incoming.sweep(store.files, force=True)
    assert removed == 2
    assert not dead.exists() and not dead.parent.parent.exists()  # the whole session
    assert live.exists() and elsewhere_young.exists() and not elsewhere_old.exists()
    # by age, later: the young one too, and `compact` does it whenever it runs
    assert incoming.sweep(store.files, now=time.time() + incoming.STALE_INCOMING_S + 60, force=True) == 2
    assert not live.exists()
    again = _session(tmp_path, 1, "another-host", age_s=incoming.STALE_INCOMING_S + 60)
    report = compact(store)
    assert report.orphans_removed == 1 and not again.exists()
    assert "deleted 1 staged parts no driver will commit" in report.line()


def test_recovery_publishes_a_committed_workers_part_before_it_sweeps(
    records: list[RunRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver dead after its commit point and before publishing: its session is a dead driver's (swept
    at once), but the marker names a part in it, and recovery applies the marker first."""
    from runner.store import txn

    folder = incoming.session_folder(_dead_pid(), incoming.host_tag())
    sent = stage(records, tmp_path, rows=1_000_000, folder=folder)

    class Died(Exception):
        pass

    def die(phase: str, label: str) -> None:
        if (label, phase) == ("flush", "marked"):
            raise Died

    monkeypatch.setattr(txn, "PHASE_HOOKS", [die])
    # as a live driver's flush sees its own session: no sweep takes it from under the commit
    monkeypatch.setattr(incoming, "_last_sweep", {str(tmp_path.resolve()): time.monotonic()})
    with pytest.raises(Died):
        write_records(ResultStore(tmp_path), sent, task_schemas)
    monkeypatch.setattr(txn, "PHASE_HOOKS", [])
    assert incoming_files(tmp_path)  # committed, not published: the parts still lie in the session
    monkeypatch.setattr(incoming, "_last_sweep", {})
    with ResultStore(tmp_path).writing():  # the next writer: recovery, then the sweep
        pass
    assert incoming_files(tmp_path) == []
    store = ResultStore(tmp_path)
    for task in ("least_squares", "faulty"):
        runs = store.read_runs(task)
        assert store.read_curves(task).num_rows == sum(runs["curve_rows"].to_pylist()) > 0


def test_a_worker_holds_records_for_a_larger_part_but_not_past_its_wait(
    records: list[RunRecord], tmp_path: Path
) -> None:
    squares = [r for r in records if r.task == "least_squares"]
    now = [0.0]
    target = StagingTarget(str(tmp_path), incoming.session_folder(), frozenset(), rows=1_000, wait_s=1.0)
    stager = Stager(target, open_target(str(tmp_path)), clock=lambda: now[0])
    now[0] = 0.1
    assert stager.offer(squares[0]) == []  # held: the next run is expected within the wait
    now[0] = 0.2
    assert stager.offer(squares[1]) == []
    now[0] = 0.95  # the last run took 0.75 s: holding on for the next would pass the wait
    sent = stager.offer(squares[2])
    assert [r.run_id for r in sent] == [r.run_id for r in squares[:3]]
    assert len({r.staged.path for r in sent if r.staged}) == 1  # one part for the three
    failed = next(r for r in records if r.status == "failed")
    assert stager.offer(failed) == [failed]  # no curve: sent at once
    now[0] = 1.0
    assert stager.offer(squares[0]) == [] and [r.run_id for r in stager.drain()] == [squares[0].run_id]


def test_a_root_the_worker_cannot_write_sends_the_rows_to_the_driver_and_says_so_without_secrets(
    records: list[RunRecord], tmp_path: Path
) -> None:
    (tmp_path / "_store").write_text("a file where the store's folder should be")
    uri = f"file://{tmp_path}?secret_access_key=hunter2"
    target = StagingTarget(uri, incoming.session_folder(), frozenset(), rows=1, wait_s=1e9)
    stager = Stager(target, open_target(str(tmp_path)), clock=lambda: 0.0)
    squares = [r for r in records if r.task == "least_squares"]
    with pytest.warns(UserWarning, match="sending them to the driver") as caught:
        sent = stager.offer(squares[0])
    assert [(r.staged, r.curve) for r in sent] == [(None, squares[0].curve)]
    assert stager.offer(squares[1]) == [squares[1]]  # the root failed: the rest of the chunk goes inline
    message = str(caught[0].message)
    assert "hunter2" not in message and "secret_access_key=***" in message
    assert "hunter2" not in repr(target) and re.search(r"nodes=0", repr(target))


def test_the_curve_rows_sent_back_inline_equal_the_run_s_own(records: list[RunRecord], tmp_path: Path) -> None:
    """A write that fails after the records were converted gives them back their curves unchanged."""
    (tmp_path / "_store").write_text("not a folder")
    target = StagingTarget(str(tmp_path), incoming.session_folder(), frozenset(), rows=10**9, wait_s=1e9)
    stager = Stager(target, open_target(str(tmp_path)), clock=lambda: 0.0)
    squares = [r for r in records if r.task == "least_squares"]
    for record in squares:
        assert stager.offer(record) == []
    with pytest.warns(UserWarning):
        back = stager.drain()
    assert [(r.run_id, r.curve, r.row) for r in back] == [(r.run_id, r.curve, r.row) for r in squares]


def test_merges_are_asked_of_the_workers_at_most_every_interval_and_never_where_they_cannot() -> None:
    from runner.execute.worker_merge import MergeCadence

    class Pool:
        def __init__(self, busy: bool = False) -> None:
            self.asked: list[tuple[str, int]] = []
            self.busy = busy

        def merge_on_worker(self, root: str, max_parts: int) -> bool:
            self.asked.append((root, max_parts))
            return not self.busy

    now = [0.0]
    pool = Pool()
    cadence = MergeCadence(pool, "results", "/abs/results", 64, every_s=30.0, clock=lambda: now[0])
    for t in (1.0, 29.0, 30.0, 45.0, 61.0):
        now[0] = t
        cadence([])
    assert pool.asked == [("/abs/results", 64)] * 2  # at 30 s and 61 s: a local root as the driver resolved it
    busy = Pool(busy=True)
    cadence = MergeCadence(busy, "s3://b/r", "b/r", 64, every_s=30.0, clock=lambda: now[0])
    now[0] += 31
    cadence([])
    now[0] += 1
    cadence([])
    assert busy.asked == [("s3://b/r", 64)] * 2  # one under way: asked again at the next commit
    off = Pool()
    MergeCadence(off, "results", "/abs", 0, every_s=0.0)([])  # CONVGRID_COMPACT_PARTS=0: never
    MergeCadence(object(), "results", "/abs", 64, every_s=0.0)([])  # an executor that cannot
    assert off.asked == []
