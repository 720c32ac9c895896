"""One driver per study at a time (runner.coord.study_lease): a second driver of a study whose holder
beats is refused with one message and changes nothing; a holder that died (its pid gone on this
host, or its beat unchanged for a lease elsewhere) is taken over; a holder paused past its lease
notices that it was. Leases are judged on a fake clock: no test here depends on timing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from runner.coord.liveness import pid_table
from runner.coord.study_lease import LEASE_DIR, StudyBusy, StudyLease
from runner.errors import EXIT_BUSY
from runner.fs.exclusive import LocalLink
from runner.fs.root import Root
from tests.conftest import CliResult, files_under

LEASE_S = 30.0


class FakeTime:
    """A monotonic clock that moves only when the code under test sleeps; `on_sleep` runs at each sleep
    (a holder's beat, say)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps = 0
        self.on_sleep: list[object] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds
        for hook in self.on_sleep:
            hook()  # type: ignore[operator]


def _lease(
    root: Path,
    time: FakeTime | None = None,
    study: str = "s",
    storage: str = "journal:optuna.journal",
    host: str | None = None,
) -> StudyLease:
    files = Root(pafs.LocalFileSystem(), str(root))
    time = time or FakeTime()
    return StudyLease(
        files, LocalLink(), study, storage, lease_s=LEASE_S, clock=time.clock, sleep=time.sleep, host=host
    )


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _plant_holder(root: Path, lease: StudyLease, host: str, pid: int) -> Path:
    """A generation-0 holder of `lease`'s study written as another process would have left it."""
    folder = root / lease.folder
    folder.mkdir(parents=True, exist_ok=True)
    body = {"study": lease.study, "storage": lease.storage, "owner": "x", "host": host, "pid": pid, "at": 0.0}
    if host == socket.gethostname():
        body["table"] = pid_table()  # what a driver of this process table writes (runner.coord.liveness)
    (folder / "g000000000.json").write_text(json.dumps(body))
    (folder / "g000000000.beat").write_text("7")
    return folder


def test_a_second_driver_is_refused_while_the_holder_beats(tmp_path: Path) -> None:
    holder = _lease(tmp_path)
    holder.acquire(beat=False)  # the test beats for it, when the other driver sleeps
    time = FakeTime()
    time.on_sleep.append(holder.beat)
    before = {p: p.read_bytes() for p in files_under(tmp_path)}
    other = _lease(tmp_path, time)
    with pytest.raises(StudyBusy) as caught:
        other.acquire(beat=False)
    message = str(caught.value)
    assert "study 's'" in message and f"host {socket.gethostname()}" in message and f"pid {os.getpid()}" in message
    assert "Wait for it to finish" in message
    # it changed nothing, and decided as soon as it saw the holder's beat move (well within a lease)
    assert {p: p.read_bytes() for p in files_under(tmp_path)} == before
    assert time.now - 1000.0 < LEASE_S
    holder.release()


def test_a_holder_whose_pid_is_gone_on_this_host_is_taken_over_at_once(tmp_path: Path) -> None:
    time = FakeTime()
    lease = _lease(tmp_path, time)
    folder = _plant_holder(tmp_path, lease, socket.gethostname(), _dead_pid())
    lease.acquire(beat=False)
    assert time.sleeps == 0
    assert (folder / "g000000001.json").is_file()
    lease.release()
    assert (folder / "g000000001.free").is_file()


def test_a_silent_holder_elsewhere_is_taken_over_after_one_lease(tmp_path: Path) -> None:
    time = FakeTime()
    lease = _lease(tmp_path, time)
    _plant_holder(tmp_path, lease, "another-host", 4242)
    lease.acquire(beat=False)
    assert time.now - 1000.0 >= LEASE_S  # a beat unchanged for a full lease, on this process's clock
    assert time.now - 1000.0 < 2 * LEASE_S
    lease.release()


def test_a_holder_elsewhere_that_beats_is_never_taken_over(tmp_path: Path) -> None:
    time = FakeTime()
    lease = _lease(tmp_path, time)
    folder = _plant_holder(tmp_path, lease, "another-host", 4242)
    beats = iter(range(8, 10_000))
    time.on_sleep.append(lambda: (folder / "g000000000.beat").write_text(str(next(beats))))
    with pytest.raises(StudyBusy, match="host another-host, pid 4242"):
        lease.acquire(beat=False)
    assert not (folder / "g000000001.json").exists()


def test_a_released_study_is_taken_at_once_and_studies_do_not_block_each_other(tmp_path: Path) -> None:
    time = FakeTime()
    first = _lease(tmp_path, time)
    first.acquire(beat=False)
    other_study = _lease(tmp_path, time, study="t")
    other_study.acquire(beat=False)  # another study of the same root: its own lease
    other_storage = _lease(tmp_path, time, storage="postgresql://db/optuna")
    other_storage.acquire(beat=False)  # the same name in another storage is another study
    first.release()
    again = _lease(tmp_path, time)
    again.acquire(beat=False)
    assert time.sleeps == 0
    for lease in (again, other_study, other_storage):
        lease.release()


def test_a_holder_paused_past_its_lease_finds_it_taken_and_stops(tmp_path: Path) -> None:
    paused = _lease(tmp_path, host="box-a")  # on another machine: only its silence lets the taker in
    paused.acquire(beat=False)
    time = FakeTime()
    taker = _lease(tmp_path, time)
    taker.acquire(beat=False)
    assert time.now - 1000.0 >= LEASE_S
    with pytest.raises(StudyBusy, match="taken over"):
        paused.check()
    paused.release()  # gives back nothing of the taker's
    folder = tmp_path / taker.folder
    assert (folder / "g000000001.json").is_file() and not (folder / "g000000001.free").exists()
    taker.check()
    taker.release()
    assert (folder / "g000000001.free").is_file()


def test_lease_files_live_under_the_store_folder(tmp_path: Path) -> None:
    lease = _lease(tmp_path)
    lease.acquire(beat=False)
    assert lease.folder.startswith(LEASE_DIR + "/")
    assert all(p.relative_to(tmp_path).parts[:2] == tuple(LEASE_DIR.split("/")) for p in files_under(tmp_path))
    lease.release()


STUDY = (
    "name: guarded\ntask: least_squares\nparams: {d_in: 4, d_out: 2, m: 12, n_iters: 10}\n"
    "objective: {metric: err_final}\nn_trials: 2\nspace:\n  lr: {type: float, low: 0.01, high: 0.5}\n"
)


def test_tune_of_a_study_another_driver_runs_exits_75_and_writes_nothing(tmp_path: Path, cli) -> None:
    from runner.tune.one_driver import study_lease

    study = tmp_path / "guarded.yaml"
    study.write_text(STUDY)
    results = tmp_path / "results"
    first: CliResult = cli("tune", str(study), "--results", str(results), "--executor", "local", "--no-progress")
    assert first.returncode == 0, first.stderr
    with study_lease(str(results), "guarded", None):  # another driver holds the study (its beat is live)
        before = {p: p.read_bytes() for p in files_under(results) if "_store" not in p.parts}
        second = cli("tune", str(study), "--results", str(results), "--executor", "local", "--n-trials", "4")
        after = {p: p.read_bytes() for p in files_under(results) if "_store" not in p.parts}
    assert second.returncode == EXIT_BUSY, second.stderr
    assert "study 'guarded'" in second.stderr and f"pid {os.getpid()}" in second.stderr
    assert "Traceback" not in second.stderr and second.stderr.count("\n") == 1
    assert after == before  # the journal, trials/ and runs/ untouched


@pytest.mark.faults
def test_two_tune_processes_on_one_study(tmp_path: Path) -> None:
    """The issue's case with real processes: a driver whose trial is in flight (it hangs until killed),
    a second `convgrid tune` of the study refused with exit 75 and nothing changed; once the first is
    SIGKILLed the second takes the study over at once (its pid is gone on this host), FAILs and asks
    again the trial left RUNNING, and finishes: no trial RUNNING, one trials/ row per trial."""
    import signal
    import time

    import yaml

    from runner.store import ResultStore
    from runner.store.columns import TRIAL_SCHEMA
    from runner.store.trials import read_trials
    from tests.conftest import REPO
    from tests.test_tune_resume import STUDY  # a study of the faulty task over x in [-2, 2]

    study = {**STUDY, "name": "shared", "sampler": {"name": "random", "seed": 0}, "n_trials": 4, "parallel": 1}
    hanging, quick = tmp_path / "hanging.yaml", tmp_path / "quick.yaml"
    hanging.write_text(yaml.safe_dump({**study, "params": {"hang_s": 600.0}}))
    quick.write_text(yaml.safe_dump({**study, "params": {"sleep_s": 0.01}}))
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def tune(path: Path) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "runner.cli", "tune", str(path), "--results", str(results)]
        command += ["--executor", "local", "--no-progress"]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    first = tune(hanging)
    journal = results / "optuna.journal"
    deadline = time.monotonic() + 120
    while not (journal.is_file() and b'"op_code":4' in journal.read_bytes()):  # its first trial was asked
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.2)
    before = {p: p.read_bytes() for p in files_under(results) if "_store" not in p.parts}
    second = tune(quick)
    out, err = second.communicate(timeout=120)
    assert second.returncode == EXIT_BUSY, err
    assert f"pid {first.pid}" in err and "study 'shared'" in err
    assert {p: p.read_bytes() for p in files_under(results) if "_store" not in p.parts} == before

    first.send_signal(signal.SIGKILL)
    first.wait()
    third = tune(quick)
    out, err = third.communicate(timeout=300)
    assert third.returncode == 0, err
    assert "told FAIL and asked again" in out  # the trial the killed driver left RUNNING
    store = ResultStore(results)
    rows = store.reader.read(store.parts("trials"), TRIAL_SCHEMA).to_pylist()  # every row, not the newest
    numbers = [r["number"] for r in rows if r["study"] == "shared"]
    assert len(numbers) == len(set(numbers)), sorted(numbers)
    trials = read_trials(store, "shared", "journal:optuna.journal").to_pylist()
    assert "RUNNING" not in {t["state"] for t in trials}
    assert sum(t["state"] == "COMPLETE" for t in trials) == 4
