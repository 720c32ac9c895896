"""Several drivers, one store (runner.coord.claims): drivers on one grid split its cells, a killed
driver's blocks are taken over, and reruns, --retry-failed and `status` see the claims right."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from runner import ResultStore, run_grid
from runner.cli import main
from runner.coord.claims import CLAIMS_DIR, Blocks
from runner.coord.liveness import DriverInfo, Liveness, pid_table
from runner.fs.exclusive import LocalLink
from runner.grid.key import grid_key_of
from runner.run.grid_run import RunReport
from runner.store.compact import compact
from runner.store.index_keys import id_array
from tests.options import opts
from tests.shared_drivers import check_takeover, kill_one_driver_midway, ledger_grid, race_to_create, read_ledger

pytestmark = pytest.mark.faults


def test_link_creates_once_among_racing_threads(tmp_path: Path) -> None:
    target = str(tmp_path / "claims" / "b000001-g000000.json")
    wins = race_to_create(LocalLink().create, target)
    assert len(wins) == 1 and Path(target).read_bytes() == wins[0]
    assert sorted(p.name for p in (tmp_path / "claims").iterdir()) == ["b000001-g000000.json"]  # no temp left


def test_two_drivers_split_a_grid_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two drivers (threads of one process: each its own claims identity) on 120 cells: every cell run
    once in all, both did work, one claim file per block, and none of the drivers is left in status."""
    ledger, root = tmp_path / "ledger", str(tmp_path / "res")
    grid = ledger_grid(tmp_path / "grid.yaml", 120, ledger)
    reports: list[RunReport] = []
    barrier = threading.Barrier(2)

    def drive() -> None:
        barrier.wait()
        reports.append(run_grid(str(grid), root, opts()))

    threads = [threading.Thread(target=drive) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    xs = [x for x, _ in read_ledger(ledger)]
    assert sorted(xs, key=float) == [f"{float(i):g}" for i in range(120)]  # each cell computed exactly once
    assert sorted(r.executed for r in reports)[0] > 0 and sum(r.executed for r in reports) == 120
    assert all(r.executed + r.by_others == 120 for r in reports)
    store = ResultStore(root)
    assert store.read_runs("faulty").num_rows == 120 and store.read_attempts("faulty").num_rows == 120
    run_ids = store.read_runs("faulty", ["run_id"])["run_id"].to_pylist()
    assert len(Blocks.of(len(run_ids))) == 15
    assert list(Path(root, CLAIMS_DIR).iterdir()) == []  # the grid is complete: the last to end removed its claims
    capsys.readouterr()
    assert main(["status", root]) == 0 and "drivers sharing" not in capsys.readouterr().out
    again = run_grid(str(grid), root, opts())
    assert again.executed == 0 and again.already_done == 120 and len(read_ledger(ledger)) == 120


def _fake_driver(claims: Path, host: str, pid: int) -> None:
    (claims / "drivers").mkdir(parents=True, exist_ok=True)
    body = {"driver": f"{host}-{pid}", "beat": 1, "host": host, "pid": pid, "at": 0.0, "done": []}
    if host == socket.gethostname():
        body["table"] = pid_table()  # what a driver of this process table writes (runner.coord.liveness)
    (claims / "drivers" / f"{host}-{pid}.json").write_text(json.dumps(body))


def test_a_complete_grid_s_claims_go_unless_another_driver_may_be_there(tmp_path: Path) -> None:
    """A driver that finds its grid complete removes the grid's claims folder, unless another driver's
    heartbeat file is there (one elsewhere may be live); `compact` removes the folders of grids whose
    drivers are gone (on this host: their pids), and only those. --retry-failed works on either."""
    grid = {
        "name": "retry",
        "blocks": [
            {"task": "faulty", "product": {"x": [float(i) for i in range(20)]}},
            {"task": "faulty", "params": {"fail": True}, "product": {"x": [1.0, 2.0]}},
        ],
    }
    root = str(tmp_path / "res")
    first = run_grid(grid, root, opts())
    assert first.counts == {"ok": 20, "failed": 2}
    assert list(Path(root, CLAIMS_DIR).iterdir()) == []
    store = ResultStore(root)
    ids = id_array(store.read_runs("faulty", ["run_id"])["run_id"].to_pylist())
    claims = Path(root, CLAIMS_DIR, grid_key_of([ids]))
    _fake_driver(claims, "another-host", 1)  # elsewhere: live or dead, one look cannot tell
    retry = run_grid(grid, root, opts(), retry_failed=True)
    assert retry.executed == 2 and retry.counts == {"failed": 2}
    assert sorted(p.name for p in claims.iterdir()) == ["b000002-g000000.json", "drivers"]  # kept for the other
    assert compact(store).claims_removed == 0 and claims.exists()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (claims / "drivers" / "another-host-1.json").unlink()
    _fake_driver(claims, socket.gethostname(), gone.pid)  # here, its process gone
    report = compact(store)
    assert report.claims_removed == 1 and "removed the claims of 1 grids" in report.line()
    assert list(Path(root, CLAIMS_DIR).iterdir()) == []
    assert store.read_attempts("faulty").num_rows == 24


def test_a_killed_driver_s_blocks_are_taken_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two drivers on 400 cells, one a `convgrid run` process SIGKILLed midway: the other finishes the
    grid, every cell stored once, at most the killed driver's in-flight runs run twice."""
    root = str(tmp_path / "res")
    seen = kill_one_driver_midway(tmp_path, root, 400, lease_s=2.0, kill_after=60)
    check_takeover(seen, 400)
    survivor = sum(seen.second in pids for pids in seen.computed.values())
    assert seen.report.executed == survivor and seen.report.already_done + survivor + seen.report.by_others == 400
    capsys.readouterr()
    assert main(["status", root]) == 0 and "drivers sharing" not in capsys.readouterr().out


def test_a_driver_is_dead_after_a_lease_of_the_same_beat_on_the_observer_s_clock() -> None:
    """A driver on another machine (its pid cannot be asked): live while its beat changes, dead once
    the observer has seen one beat for a lease; its wall clock is never used."""
    seen = Liveness()
    far = DriverInfo("elsewhere-1-abc", beat=3, host="another-host", pid=1, at=0.0, done=frozenset())
    assert seen.alive(far, lease_s=2.0, now=100.0)
    assert seen.alive(far, lease_s=2.0, now=101.9)
    assert not seen.alive(far, lease_s=2.0, now=102.1)
    assert seen.alive(replace(far, beat=4), lease_s=2.0, now=102.2)  # it beat again: live again
    assert not seen.alive(None, lease_s=2.0, now=102.2)  # its file is gone: it ended
    here = replace(far, host=socket.gethostname(), pid=os.getpid(), table=pid_table())
    assert seen.alive(here, lease_s=2.0, now=0.0)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert not seen.alive(replace(here, pid=gone.pid), lease_s=2.0, now=0.0)  # same host, process gone
