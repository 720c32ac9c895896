"""Containers with host networking share a host name and not their pids (issue 44): liveness is
judged by the process table (boot id and pid namespace) and the process's start time, never by the
host name alone. A record of another table is judged by its beat; one of this table by its pid."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runner import ResultStore
from runner.coord.claims import CLAIMS_DIR, remove_idle_claims
from runner.coord.liveness import DriverInfo, Liveness, gone_here, pid_table, running_here, start_time
from runner.coord.study_lease import StudyLease
from runner.fs.exclusive import LocalLink
from runner.fs.root import Root
from runner.store import incoming


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


OTHER_TABLE = "0123456789abcdef"  # another container's (or another boot's) process table


def test_this_process_is_identified_beyond_its_host_name() -> None:
    table, start = pid_table(), start_time(os.getpid())
    assert len(table) == 16 and start.isdigit()
    assert running_here(table, os.getpid(), start) and not gone_here(table, os.getpid(), start)
    assert gone_here(table, _dead_pid(), "")  # this table, its pid free: dead at once
    assert gone_here(table, os.getpid(), str(int(start) + 1))  # its pid reused by a later process
    assert not gone_here(OTHER_TABLE, _dead_pid(), "") and not gone_here("", _dead_pid(), "")


def test_same_host_name_in_another_pid_namespace_is_not_dead_at_once() -> None:
    seen = Liveness()
    other = DriverInfo("d", 1, socket.gethostname(), _dead_pid(), 0.0, frozenset(), OTHER_TABLE, "123")
    assert seen.alive(other, lease_s=2.0, now=100.0)  # dead at once before: same host name, pid free here
    assert seen.alive(other, lease_s=2.0, now=101.9)
    assert not seen.alive(other, lease_s=2.0, now=102.1)  # its beat stood a lease: dead
    legacy = DriverInfo("e", 1, socket.gethostname(), _dead_pid(), 0.0, frozenset())  # an older record
    assert seen.alive(legacy, lease_s=2.0, now=0.0)
    here = DriverInfo("f", 1, socket.gethostname(), _dead_pid(), 0.0, frozenset(), pid_table(), "")
    assert not seen.alive(here, lease_s=2.0, now=0.0)  # this table, pid gone: at once


def test_a_live_session_of_another_container_keeps_its_staged_parts(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    dead = _dead_pid()
    parts = {}
    for name, folder in {
        "other container": incoming.session_folder(dead, table=OTHER_TABLE),
        "older convgrid": f"{incoming.INCOMING_DIR}/20250101-abc.{dead}.{incoming.host_tag()}",
        "this table, dead": incoming.session_folder(dead),
    }.items():
        part = tmp_path / folder / "w1" / "part-00000000000000000001-000000000001-10-00000000.parquet"
        part.parent.mkdir(parents=True)
        part.write_bytes(b"0123456789")
        parts[name] = part
    assert incoming.sweep(store.files, force=True) == 1
    assert parts["other container"].exists() and parts["older convgrid"].exists()  # deleted before
    assert not parts["this table, dead"].exists()


def test_claims_of_a_driver_in_another_container_are_kept(tmp_path: Path) -> None:
    files = Root(*(ResultStore(tmp_path).fs, str(tmp_path)))
    drivers = tmp_path / CLAIMS_DIR / "grid" / "drivers"
    drivers.mkdir(parents=True)
    body = {"driver": "d-1", "beat": 1, "host": socket.gethostname(), "pid": _dead_pid(), "at": 0.0, "done": []}
    (drivers / "d-1.json").write_text(json.dumps({**body, "table": OTHER_TABLE}))
    assert remove_idle_claims(files) == 0 and drivers.exists()  # removed before: same host name, pid free
    (drivers / "d-1.json").write_text(json.dumps({**body, "table": pid_table()}))
    assert remove_idle_claims(files) == 1


def test_a_study_holder_in_another_container_is_not_taken_over_at_once(tmp_path: Path) -> None:
    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

        def sleep(self, s: float) -> None:
            self.now += s

    clock = Clock()
    lease = StudyLease(Root(ResultStore(tmp_path).fs, str(tmp_path)), LocalLink(), "s", "j", 2.0, clock, clock.sleep)
    folder = tmp_path / lease.folder
    folder.mkdir(parents=True)
    body = {"study": "s", "storage": "j", "owner": "x", "host": socket.gethostname(), "pid": _dead_pid(), "at": 0.0}
    (folder / "g000000000.json").write_text(json.dumps({**body, "table": OTHER_TABLE}))
    lease.acquire(beat=False)
    assert clock.now >= 2.0  # a lease of its silent beat first (at once before: same host name, pid free)
    lease.release()


# ---- a filesystem without a lock refuses a second writer, loudly ------------------------------------------


def test_a_second_writer_on_a_filesystem_without_a_lock_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa
    import pyarrow.fs as pafs

    from runner.errors import Busy
    from runner.store.txn import Transaction

    monkeypatch.setenv("CONVGRID_LOCK_LEASE_S", "0.6")
    base = tmp_path / "bucket"
    base.mkdir()

    def opened() -> ResultStore:  # like gs://: no create-if-absent convgrid can use
        return ResultStore("root", filesystem=pafs.SubTreeFileSystem(str(base), pafs.LocalFileSystem()))

    first, second = opened(), opened()
    with first.writing():
        txn = Transaction(first.files)
        txn.add(pa.table({"x": [1]}), "members")
        txn.commit()
    with pytest.raises(Busy, match="another command writes the results root"), second.writing():
        pass  # silently let in before
    assert second.parts("members") == [txn.marker.adds[0][1]]
    first.lock.close()  # type: ignore[attr-defined]  # the first command ends
    with second.writing():  # its record gone: the root is the second's
        pass
    second.lock.close()  # type: ignore[attr-defined]
