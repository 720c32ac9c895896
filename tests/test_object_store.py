"""A results root on an object store: an S3-compatible server (moto) on loopback, with resume."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from runner import ResultStore, run_grid
from runner.cli import main
from runner.coord.lease_lock import LOCK_DIR, LeaseLock, LockLost
from runner.coord.liveness import pid_table
from runner.fs.exclusive import S3IfNoneMatch, for_root
from runner.store.compact import compact
from runner.store.txn import Transaction
from tests.conftest import done_ids
from tests.loopback_s3 import moto_bucket
from tests.options import opts
from tests.shared_drivers import check_takeover, kill_one_driver_midway, race_to_create

pytestmark = pytest.mark.services

GRID = {
    "name": "s3",
    "blocks": [{"task": "least_squares", "params": {"n_iters": 200}, "product": {"lr": [0.01, 0.02, 9.0]}}],
}


@pytest.fixture(scope="module")
def s3_root() -> Iterator[str]:
    with moto_bucket("convgrid") as uri:
        yield uri.format("results")


def test_run_resume_status_and_compact_on_s3(s3_root: str, capsys: pytest.CaptureFixture[str]) -> None:
    first = run_grid(GRID, s3_root, opts())
    assert first.executed == 3 and first.counts == {"ok": 2, "diverged": 1}
    again = run_grid(GRID, s3_root, opts())
    assert again.executed == 0
    store = ResultStore(s3_root)
    assert not store.local and store.tasks() == ["least_squares"]
    assert len(done_ids(store)) == 3
    curves_before = store.read_curves("least_squares").num_rows
    run_grid({**GRID, "blocks": [{**GRID["blocks"][0], "product": {"lr": [0.01, 0.03]}}]}, s3_root, opts())
    compact(store)
    assert len(done_ids(store)) == 4
    assert store.read_curves("least_squares").num_rows == curves_before + 200
    assert main(["status", s3_root]) == 0
    assert "s3" in capsys.readouterr().out


def test_if_none_match_creates_once_among_racing_threads(s3_root: str) -> None:
    """The primitive the claims rely on, against the server: of 8 racing PUTs with If-None-Match: *,
    exactly one succeeds and its body is what the key holds."""
    store = ResultStore(s3_root)
    exclusive = for_root(s3_root, store.fs)
    assert isinstance(exclusive, S3IfNoneMatch)
    target = store.files.abs("_store/claims/race/b000000-g000000.json")
    wins = race_to_create(exclusive.create, target)
    assert len(wins) == 1
    with store.fs.open_input_stream(target) as stream:
        assert stream.read() == wins[0]
    assert not exclusive.create(target, b"late")


def test_a_killed_driver_s_blocks_are_taken_over_on_s3(s3_root: str, tmp_path: Path) -> None:
    root = s3_root.replace("convgrid/results", "convgrid/shared")
    # unbatched 20 ms cells, flushed every 0.1 s: a driver claims blocks as fast as its executor asks,
    # so 64 fast (or batched) cells may all be claimed before the second driver has its first lock
    seen = kill_one_driver_midway(
        tmp_path, root, 64, lease_s=2.0, kill_after=12, batch=False, sleep_s=0.02, flush_s=0.1
    )
    check_takeover(seen, 64)
    # the survivor found the grid complete, and the killed driver's file is of this host, its pid gone:
    # the grid's claims folder went with the survivor
    assert ResultStore(root).files.listing("_store/claims") == []


def _lock(root: str, lease_s: float, **clocks: Any) -> LeaseLock:
    """A writers' lock of its own on `root` (one per store object: two in one process exclude each other)."""
    files = ResultStore(root).files
    exclusive = for_root(root, files.fs)
    assert isinstance(exclusive, S3IfNoneMatch)
    return LeaseLock(files, exclusive, lease_s, **clocks)


class FakeClock:
    """A monotonic clock that moves only when the code under test sleeps on it."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_two_lease_lock_holders_exclude_each_other(s3_root: str) -> None:
    """A second acquire waits until the first holder releases; the lock stays held across several
    beats (the holder renews it) and is re-entrant within one holder."""
    root = s3_root.replace("convgrid/results", "convgrid/lock-two")
    # a lease long enough that a busy machine's scheduler does not starve the holder's beats past it
    # (at 0.4 s the check failed once beside three busy loops on 2 cores)
    refused_for_long = threading.Event()  # the waiter has looked, and waited, for 2.5 leases of its clock

    def waiting(seconds: float, since: list[float] = []) -> None:  # noqa: B006 - the first wait's time
        since.append(time.monotonic())
        time.sleep(seconds)
        if time.monotonic() - since[0] >= 2.5:
            refused_for_long.set()

    first, second = _lock(root, 1.0), _lock(root, 1.0, sleep=waiting)
    events: list[str] = []

    def hold_second() -> None:
        with second.held():
            events.append("second in")
            refused_for_long.set()  # (only a wrong takeover gets here before the first is out)

    with first.held(), first.held():  # re-entrant
        events.append("first in")
        waiter = threading.Thread(target=hold_second)
        waiter.start()
        # 2.5 leases of looks: the first holder's beats keep the lock its own
        assert refused_for_long.wait(60) and events == ["first in"]
        first.check()
        events.append("first out")
    waiter.join(timeout=10)
    assert events == ["first in", "first out", "second in"]
    with pytest.raises(LockLost):
        first.check()  # released: it may commit nothing more
    names = {i.base_name for i in ResultStore(root).files.listing(LOCK_DIR)}
    assert {"g000000000.json", "g000000000.free", "g000000001.json", "g000000001.free"} <= names
    assert names <= {"g000000000.beat", "g000000001.beat"} | {"g000000000.json", "g000000000.free"} | {
        "g000000001.json",
        "g000000001.free",
    }
    first.keep = 2  # generations more than `keep` behind the holder's are deleted: the folder stays small
    for _ in range(4):
        with first.held():
            pass
    gens = sorted({i.base_name[:10] for i in ResultStore(root).files.listing(LOCK_DIR)})
    assert gens == ["g000000003", "g000000004", "g000000005"]


def test_a_lease_lock_holder_that_stops_beating_is_taken_over_after_the_lease(s3_root: str) -> None:
    """A holder on another host (its pid cannot be asked) that stopped beating, as a dead process does:
    taken over once its beat was seen unchanged for a lease, not before. A holder on this host whose
    process is gone is taken over at once."""
    root = s3_root.replace("convgrid/results", "convgrid/lock-dead")
    clock = FakeClock()  # the taker's view of time: it passes only while the taker waits its turn
    taker = _lock(root, 0.6, clock=clock, sleep=clock.sleep)
    elsewhere = {"owner": "x", "host": "another-host", "pid": 1, "at": 0.0}
    assert taker.exclusive.create(taker._path(0, "json"), json.dumps(elsewhere).encode())
    t0 = clock()
    with taker.held():
        waited = clock() - t0
    assert 0.6 <= waited <= 0.6 + taker.poll_s  # a lease of one unchanged beat, then the next look
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    here = {"owner": "y", "host": socket.gethostname(), "pid": gone.pid, "at": 0.0, "table": pid_table()}
    assert taker.exclusive.create(taker._path(2, "json"), json.dumps(here).encode())  # g1 was released: g2 is next
    t0 = clock()
    with taker.held():
        assert taker._gen == 3
    assert clock() == t0  # not one poll waited: its pid is gone


def test_a_paused_holder_refuses_to_commit(s3_root: str) -> None:
    """A holder whose beats stopped (paused past half a lease) may have lost the lock: its
    transaction raises before the commit point and nothing becomes visible."""
    root = s3_root.replace("convgrid/results", "convgrid/lock-paused")
    store = ResultStore(root)
    assert isinstance(store.lock, LeaseLock)
    store.lock.lease_s = 0.4
    heartbeat = store.lock.heartbeat
    with store.writing():
        heartbeat.stop()  # its heartbeat thread stops: as if the process were paused ...
        clock = FakeClock()  # ... on a clock of the test's (the machine's own speed plays no part)
        heartbeat.clock, heartbeat.last_success = clock, clock.now
        clock.sleep(0.19)  # just under half a lease since its last beat: it may commit
        first = Transaction(store.files)
        first.add(pa.table({"x": [1]}), "members")
        first.commit()
        clock.sleep(0.11)  # 0.3 s: past half its lease, within the lease
        txn = Transaction(store.files)
        txn.add(pa.table({"x": [2]}), "members")
        with pytest.raises(LockLost):
            txn.commit()
    assert store.parts("members") == [first.marker.adds[0][1]]  # the first's part, and only it


def test_compact_racing_a_live_driver_on_s3_loses_and_doubles_nothing(s3_root: str) -> None:
    """As tests/test_store_faults.py does locally: a driver committing each run on its own while
    another store object compacts in a loop (each has its own place in the lock's queue, as two
    processes have); the writers' lock, a lease here, keeps them apart."""
    root = s3_root.replace("convgrid/results", "convgrid/race")
    n = 8
    spec = {
        "name": "race",
        "blocks": [{"task": "faulty", "params": {"sleep_s": 0.05}, "product": {"x": list(range(n))}}],
    }
    driver = threading.Thread(target=run_grid, args=(spec, root, opts(batch=False, flush_every=1, flush_s=0.01)))
    driver.start()
    store = ResultStore(root)
    compactions = 0
    while driver.is_alive():
        if store.tasks():
            compact(store)
            compactions += 1
    driver.join()
    assert compactions >= 2
    store = ResultStore(root)
    assert len(done_ids(store)) == n
    assert store.read_curves("faulty").num_rows == n  # every run kept its curve
    assert store.read_attempts("faulty").num_rows == n  # and ran once
    assert not store.files.listing("_store/txn")


def test_a_study_lease_on_s3_refuses_a_second_driver_and_passes_on_when_freed(s3_root: str) -> None:
    from runner.coord.study_lease import StudyBusy, StudyLease

    def lease(host: str | None = None, clock: FakeClock | None = None) -> StudyLease:
        files = ResultStore(s3_root).files
        exclusive = for_root(s3_root, files.fs)
        assert isinstance(exclusive, S3IfNoneMatch)
        clock = clock or FakeClock()
        return StudyLease(files, exclusive, "s3-study", "postgresql://db", 30.0, clock, clock.sleep, host=host)

    first = lease()
    first.acquire(beat=False)
    with pytest.raises(StudyBusy, match="study 's3-study'"):
        lease().acquire(beat=False)  # a live pid on this host, its lease object written just now
    first.release()
    elsewhere = lease(host="box-a")
    elsewhere.acquire(beat=False)  # freed: taken at once
    clock = FakeClock()
    taker = lease(clock=clock)
    taker.acquire(beat=False)  # box-a never beat: taken over after one lease of this driver's clock
    assert clock.now - 100.0 >= 30.0
    with pytest.raises(StudyBusy, match="taken over"):
        elsewhere.check()
    taker.release()


def test_a_holder_paused_right_after_its_check_cannot_commit_over_the_next(s3_root: str) -> None:
    """The window the half-lease check leaves (issue 44): a holder paused right after it, past its lease,
    resumes and commits. The commit itself is a put-if-absent of the next numbered commit record, so
    of the two holders' transactions exactly one is committed, and it is the new holder's."""
    root = s3_root.replace("convgrid/results", "convgrid/fenced")
    paused, taker = ResultStore(root), ResultStore(root)
    for store in (paused, taker):
        assert isinstance(store.lock, LeaseLock)
        store.lock.lease_s = 0.4
        store.lock.heartbeat.period_s, store.lock.heartbeat.lapse_s = 0.4 / 6, 0.4 / 3
    with paused.writing():
        txn = Transaction(paused.files)
        txn.add(pa.table({"x": [1]}), "members")
        paused.lock.heartbeat.stop()  # paused: its beats stop ...
        paused.files.fence = lambda: None  # ... right after its check passed
        with taker.writing():  # a lease of its unchanged beat later, the lock is the taker's
            other = Transaction(taker.files)
            other.add(pa.table({"x": [2]}), "members")
            other.commit()
        with pytest.raises(LockLost, match="not committed"):
            txn.commit()  # committed over the taker's before
    store = ResultStore(root)
    assert store.parts("members") == [other.marker.adds[0][1]]  # the taker's part, and only it
    assert store.files.listing("_store/staging") == []  # what only the refused transaction staged went


def test_a_part_gone_mid_read_is_read_again_not_damaged(s3_root: str) -> None:
    """S3 reports a key deleted under a streaming reader (its footer read, its pages not yet) as an
    OSError ("NOT_FOUND during GetObject"), not FileNotFoundError: a part published or replaced by a
    concurrent commit was marked damaged (seen in issue 44's soak). Gone is not damaged: the reader
    lists again."""
    from runner.store.columns import TRIAL_SCHEMA

    root = s3_root.replace("convgrid/results", "convgrid/gone")
    store = ResultStore(root)
    store.write_part(TRIAL_SCHEMA.empty_table(), "trials")
    (part,) = store.parts("trials")
    reader = ResultStore(root).reader
    assert reader.schema(part) is not None
    store.fs.delete_file(store.files.abs(part))
    with pytest.raises(FileNotFoundError):
        reader.mark_damaged(part, OSError("AWS Error NOT_FOUND during GetObject operation"))
    assert part not in reader.damaged


def test_a_commit_record_whose_writer_died_before_its_marker_is_finished_by_the_next(s3_root: str) -> None:
    """The commit point is the fenced record: a writer killed between it and the marker's upload has
    committed, and the next holder writes the marker from the record and publishes it."""
    root = s3_root.replace("convgrid/results", "convgrid/unsealed")
    store = ResultStore(root)
    seal = store.files.seal

    def dies_after_the_record(body: bytes, then: Callable[[], None]) -> None:
        def killed() -> None:
            raise KeyboardInterrupt  # as a kill right after the record was created

        seal(body, killed)

    store.files.seal = dies_after_the_record
    with pytest.raises(KeyboardInterrupt), store.writing():
        txn = Transaction(store.files)
        final = txn.add(pa.table({"x": [1]}), "members")
        txn.commit()
    assert store.files.listing("_store/txn") == []  # no marker: readers do not see it yet
    assert ResultStore(root).parts("members") == []
    after = ResultStore(root)
    with after.writing():  # the next holder's recovery
        pass
    assert after.parts("members") == [final] and after.files.listing("_store/txn") == []


def test_a_holder_paused_past_pruned_records_cannot_recreate_one(s3_root: str) -> None:
    """Records far behind the newest are pruned: a holder whose number is that old creates it again, sees
    a later record in the one-key listing that follows, and withdraws its own."""
    from runner.coord.fenced_commits import CommitConflict, CommitLog

    root = s3_root.replace("convgrid/results", "convgrid/pruned")
    files = ResultStore(root).files
    exclusive = for_root(root, files.fs)
    assert isinstance(exclusive, S3IfNoneMatch)
    log = CommitLog(files, exclusive)
    for number in (1, 2, 3):
        assert exclusive.create(files.abs(f"_store/commits/c{number:012d}.json"), b"{}")
    files.fs.delete_file(files.abs("_store/commits/c000000000002.json"))  # pruned
    log.next = 2  # learnt before records 2 and 3 were made: paused since
    with pytest.raises(CommitConflict, match="behind c000000000003"):
        log.seal(b"{}", lambda: None)
    assert log.numbers() == [1, 3]  # its record withdrawn
