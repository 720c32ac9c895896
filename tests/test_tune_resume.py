"""A `convgrid tune` driver SIGKILLed mid-study, then run again: the study continues to the requested
number of finished trials, nothing is left RUNNING, the interrupted trial is FAILed and its params
asked again, and every finished trial is in trials/ with its run in runs/ (trials told before their
runs were flushed have those runs run again at the next start)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from runner.store import ResultStore
from runner.store.trials import read_trials
from runner.tune.optuna_adapter import open_storage
from tests.conftest import REPO
from tests.faulty_inputs import faulty_study

pytestmark = pytest.mark.faults

STUDY = faulty_study("killed", 10, 2, sleep_s=0.25, sampler={"name": "tpe", "seed": 3})


def _cmd(study: Path, root: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "runner.cli",
        "tune",
        str(study),
        "--results",
        str(root),
        "--executor",
        "local",
        "--no-progress",
        "--flush-seconds",
        "600",  # nothing reaches runs/ before the kill: the trials told by then have no stored run yet
    ]


def _trials(root: Path) -> list[optuna.trial.FrozenTrial]:
    storage = open_storage(None, ResultStore(root)).optuna_storage
    try:
        return optuna.load_study(study_name="killed", storage=storage).get_trials(deepcopy=False)
    except KeyError:
        return []


def test_driver_sigkilled_mid_study_resumes_to_n_trials(tmp_path: Path) -> None:
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    root = tmp_path / "results"
    interrupted: list[int] = []
    first_try = False
    for attempt in range(3):  # kill while a trial runs (almost always the first time)
        proc = subprocess.Popen(_cmd(study, root), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            trials = _trials(root) if (root / "optuna.journal").exists() else []
            # A RUNNING trial with params: asked and being evaluated (not just created by ask).
            if sum(t.state == TrialState.COMPLETE for t in trials) >= 2 + len(interrupted) and any(
                t.state == TrialState.RUNNING and t.params for t in trials
            ):
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        interrupted = [t.number for t in _trials(root) if t.state == TrialState.RUNNING]
        if interrupted:
            first_try = attempt == 0
            break
    assert interrupted, "the driver was never killed while a trial ran"
    killed_params = {n: t.params for t in _trials(root) for n in interrupted if t.number == n}

    final = subprocess.run(_cmd(study, root), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert final.returncode == 0, final.stderr
    assert "told FAIL and asked again" in final.stdout
    if first_try:  # trials were told in the killed driver, and none of their runs was flushed
        assert "missing from the store (a killed driver), run again" in final.stdout
    trials = _trials(root)
    states = [t.state for t in trials]
    assert TrialState.RUNNING not in states and TrialState.WAITING not in states
    assert sum(s in (TrialState.COMPLETE, TrialState.PRUNED) for s in states) == 10
    for number in interrupted:
        assert trials[number].state == TrialState.FAIL
        retries = [t for t in trials if t.user_attrs.get("retry_of") == number]
        if killed_params[number]:  # a trial killed between its creation and its params has none to ask
            assert [(t.params, t.state) for t in retries] == [(killed_params[number], TrialState.COMPLETE)]
    # trials/ has every finished trial once, linked to a stored run for each COMPLETE one.
    store = ResultStore(root)
    rows = read_trials(store, "killed").to_pylist()
    assert [r["number"] for r in rows] == [t.number for t in trials]
    assert [r["state"] for r in rows] == [t.state.name for t in trials]
    ok_runs = {r["run_id"] for r in store.read_runs("faulty", ["status"]).to_pylist() if r["status"] == "ok"}
    assert {r["run_id"] for r in rows if r["state"] == "COMPLETE"} <= ok_runs
    # Running the finished study again does nothing.
    again = subprocess.run(_cmd(study, root), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "0 runs executed" in again.stdout, again.stdout + again.stderr
