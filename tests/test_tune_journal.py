"""The Optuna journal's tail: a driver killed mid-append leaves a torn last line, which Optuna's reader
skips as long as it stays last. Appending after it glued the next record to it, and the journal was
unreadable from then on (JSONDecodeError at every start). Before each append the tail is checked under
the journal's lock: a torn or undecodable last line is cut, kept beside the journal, and one warning
says so."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from runner.tune.driver import tune
from runner.tune.optuna_adapter import JOURNAL_NAME
from tests.conftest import CliResult
from tests.options import opts

STUDY = {
    "name": "torn",
    "task": "least_squares",
    "params": {"d_in": 4, "d_out": 2, "m": 12, "n_iters": 10},
    "space": {"lr": {"type": "float", "low": 0.01, "high": 0.5}},
    "objective": {"metric": "err_final"},
    "sampler": {"name": "random", "seed": 1},
    "n_trials": 3,
    "parallel": 1,
}


def _lines(journal: Path) -> list[dict]:
    return [json.loads(line) for line in journal.read_bytes().splitlines()]


@pytest.mark.parametrize(
    "tail",
    [
        b'{"op_code":6,"worker_id":"dead-driver","trial_id":3,"par',  # torn mid-write: no newline
        b'{"op_code":6,"worker_id":"dead-dri\x00\x00\x00\n',  # a newline, but not a JSON record
    ],
    ids=["torn", "garbled"],
)
def test_a_torn_journal_tail_is_cut_kept_and_the_study_goes_on(tmp_path: Path, tail: bytes) -> None:
    results = tmp_path / "results"
    (report,) = tune(dict(STUDY), results, opts())
    assert report.states["COMPLETE"] == 3
    journal = results / JOURNAL_NAME
    good = journal.read_bytes()
    journal.write_bytes(good + tail)  # what a driver SIGKILLed inside its write leaves

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        (report,) = tune(dict(STUDY), results, opts(), n_trials=5)
    assert report.states["COMPLETE"] == 5
    cut = [w for w in caught if "torn" in str(w.message)]
    assert len(cut) == 1, [str(w.message) for w in caught]
    message = str(cut[0].message)
    assert str(journal) in message and f"{len(tail)} bytes" in message

    # every line decodes; what came before the cut is intact; what was cut is kept beside the journal
    records = _lines(journal)
    assert journal.read_bytes().startswith(good)
    kept = [p for p in results.iterdir() if p.name.startswith(JOURNAL_NAME + ".torn-")]
    assert len(kept) == 1 and kept[0].read_bytes() == tail and str(kept[0]) in message
    assert sum(r["op_code"] == 4 for r in records) >= 5  # trials created: the study really went on
    (report,) = tune(dict(STUDY), results, opts(), n_trials=6)  # and it reads back at the next start
    assert report.states["COMPLETE"] == 6


def test_an_intact_journal_is_left_as_it_is(tmp_path: Path) -> None:
    results = tmp_path / "results"
    tune(dict(STUDY), results, opts())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tune(dict(STUDY), results, opts(), n_trials=4)
    assert not [w for w in caught if "torn" in str(w.message)]
    assert not [p for p in results.iterdir() if ".torn-" in p.name]


def test_a_storage_that_is_no_journal_is_refused_and_nothing_is_written(
    tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    """`--storage` naming a folder, a file that is not a journal (a study file), a damaged journal, or a
    URL no driver opens: exit 2 with a message naming --storage, and no lease or journal left behind."""
    import yaml

    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    damaged = tmp_path / "damaged.journal"
    damaged.write_bytes(b'{"op_code":0,"worker_id":"w","study_name":"s","directions":[1]}\n{garbled\n{"op_code":1}\n')
    for storage, message in [
        (str(tmp_path), "is a folder"),
        (str(study), "cannot be read as an Optuna journal"),
        (str(damaged), "cannot be read as an Optuna journal"),
        ("bogus://x", "cannot open storage"),
    ]:
        root = tmp_path / f"results-{len(message)}-{Path(storage).name}"
        out = cli("tune", str(study), "--results", str(root), "--storage", storage, "--executor", "local")
        assert out.returncode == 2, out.stderr
        assert "--storage" in out.stderr and message in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert not root.exists() or not any(root.rglob("*")), sorted(root.rglob("*"))  # no lease, no journal
    assert study.read_text() == yaml.safe_dump(STUDY)  # the file given as storage is untouched


def test_a_study_that_stops_at_max_failed_says_why_and_exits_1(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """Every run ok, every trial FAIL (its objective, iterations to a tolerance never reached, is NaN):
    the summary groups the FAIL trials by reason and the command exits 1, so `convgrid tune && ...` stops
    (it printed only `stopped early` and exited 0)."""
    import yaml

    raw = {**STUDY, "name": "never", "objective": {"metric": "iters_to_tol"}, "n_trials": 4, "max_failed": 2}
    raw["params"] = {**STUDY["params"], "tol": 1e-300}
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(raw))
    out = cli("tune", str(study), "--results", str(tmp_path / "r"), "--executor", "local", "--no-progress")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "stopped early: max_failed (2) reached" in out.stdout
    assert "FAIL trials by reason: objective metric is NaN (2)" in out.stdout, out.stdout
    assert "study never stopped at max_failed: its FAIL trials: objective metric is NaN" in out.stderr


# ---- the journal's lock (issue 44): Optuna's grace, and a wait that says what it waits for --------------


def test_the_journal_lock_keeps_optunas_grace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import inspect
    from typing import Any

    from optuna.storages.journal import JournalFileSymlinkLock

    from runner.tune import journal_lock, optuna_journal

    made: list[Any] = []

    def spy(path: str, lock_class: type) -> Any:
        made.append(journal_lock.journal_lock(path, lock_class))
        return made[-1]

    monkeypatch.setattr(optuna_journal, "journal_lock", spy)  # the lock the journal backend is built with
    optuna_journal.journal_backend(tmp_path / "j.log")
    optunas = inspect.signature(JournalFileSymlinkLock.__init__).parameters["grace_period"].default
    assert len(made) == 1 and made[0].grace_period >= max(30, optunas)  # 5 s before: a stalled appender lost it


def test_a_wait_for_the_journal_lock_says_so_at_once(tmp_path: Path) -> None:
    import threading

    from runner.tune.journal_lock import JournalLockWait
    from runner.tune.optuna_journal import journal_backend

    journal = tmp_path / "j.log"
    backend = journal_backend(journal)
    lock = Path(f"{journal}.lock")
    lock.symlink_to(journal)  # what Optuna's lock is: another appender holds it now
    said: list[str] = []
    done = threading.Event()

    def append() -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            backend.append_logs([{"op_code": 0, "worker_id": "w"}])
        said.extend(str(w.message) for w in seen if issubclass(w.category, JournalLockWait))
        done.set()

    thread = threading.Thread(target=append)
    thread.start()
    assert not done.wait(0.5)  # it waits (the holder is live: nothing is broken within the grace) ...
    lock.unlink()  # ... until the holder releases
    assert done.wait(10)
    thread.join()
    assert len(said) == 2 and str(lock) in said[0] and "30 s" in said[0] and "got" in said[1]
    assert _lines(journal) == [{"op_code": 0, "worker_id": "w"}]
