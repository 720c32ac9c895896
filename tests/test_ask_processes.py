"""Trials asked in processes of their own (runner.tune.ask_processes): each process asks with a sampler
seeded apart, the driver tells, reports and stores the trials as its own, a process that fails or dies
hands the asking back to the driver, and `auto` starts the processes only where the driver's asks set
the pace and enough are left to pay their start."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner.execute.local import LocalExecutor
from runner.store import ResultStore
from runner.store.trials import read_trials
from runner.tune.ask_processes import ASK_PROCESS_COST_S, Asker, AskProcesses, ask_process_count
from runner.tune.driver import tune
from runner.tune.optuna_adapter import JOURNAL_NAME, AskServer, State, Study, load_plans, open_storage
from tests.options import opts
from tests.test_tune import ls_study
from tests.waiting import until

WAIT_S = 120.0  # a process that has not opened the study by then fails the test (a second when quiet)


def _study(root: Path, name: str = "remote", **extra: Any) -> Study:
    plan = load_plans(ls_study(name, n_trials=20, parallel=2, sampler={"name": "random", "seed": 0}, **extra))[0]
    return Study.open(plan, open_storage(None, ResultStore(root)))


def _until(condition: Any) -> None:
    until(condition, WAIT_S, "the ask processes", every_s=0.05)


def _creators(root: Path) -> list[str]:
    """The process (its journal worker id, less the thread) that created each trial, in trial order."""
    lines = [json.loads(line) for line in (root / JOURNAL_NAME).read_text().splitlines()]
    return [line["worker_id"].rsplit("-", 1)[0] for line in lines if line["op_code"] == 4]  # CREATE_TRIAL


@pytest.fixture
def asker(tmp_path: Path) -> Iterator[Asker]:
    """An asker whose two ask processes have both opened the study (two whatever the CPUs)."""
    study = _study(tmp_path)
    asker = Asker(study, 2, "off")
    asker.processes = AskProcesses(study.ask_servers(2))
    try:
        _until(lambda: asker.processes is not None and asker.processes.opened == 2)
        yield asker
    finally:
        asker.close()


def test_trials_asked_in_processes_are_the_drivers_to_report_and_tell(tmp_path: Path, asker: Asker) -> None:
    """Four asks go to the two processes in turn; the first of each is what the plan's sampler seeded
    seed+1 and seed+2 proposes (an independent study in memory draws it); the driver reports to and
    tells the trials, and its storage has them COMPLETE."""
    import optuna

    assert asker.remote
    asked = [asker.ask() for _ in range(4)]
    study = asker.study
    assert [a.number for a in asked] == [0, 1, 2, 3]
    creators = _creators(tmp_path)
    assert len(set(creators)) == 2 and creators[0] != creators[1]  # two processes, in turn

    def first_draw(seed: int) -> float:
        alone = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        return float(alone.ask({"lr": optuna.distributions.FloatDistribution(0.05, 0.6, log=True)}).params["lr"])

    assert {asked[0].params["lr"], asked[1].params["lr"]} == {first_draw(1), first_draw(2)}
    for a in asked:
        assert study.report(a, 0.5, 0)  # the driver's own Optuna trial, made for the pruner
        study.tell(a, [math.log10(a.params["lr"])])
    told = study.trials()
    assert [t.state for t in told] == [State.COMPLETE] * 4
    assert [t.values for t in told] == [[math.log10(a.params["lr"])] for a in asked]
    # the reports reached each trial in the storage (read back by another reader of the journal)
    stored = optuna.load_study(study_name="remote", storage=open_storage(None, ResultStore(tmp_path)).optuna_storage)
    assert [t.intermediate_values for t in stored.get_trials()] == [{0: 0.5}] * 4


def test_a_process_that_dies_hands_the_asking_back_to_the_driver(tmp_path: Path, asker: Asker) -> None:
    from runner.tune.ask_processes import AskProcessWarning

    assert asker.processes is not None
    for proc, _ in asker.processes._procs:
        proc.kill()  # both: whichever the next ask goes to is gone
        proc.wait()
    with pytest.warns(AskProcessWarning, match="ended while asking"):
        first = asker.ask()
    second = asker.ask()
    assert not asker.remote and [first.number, second.number] == [0, 1]
    driver = _creators(tmp_path)
    assert driver[0] == driver[1]  # both asked by one process, the driver


def test_a_process_that_cannot_open_the_study_leaves_the_asks_to_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    study = _study(tmp_path)
    missing = str(tmp_path / "no" / "such" / "folder" / JOURNAL_NAME)
    servers = study.ask_servers(1)
    monkeypatch.setattr(
        study, "ask_servers", lambda n: [AskServer("remote", missing, s.optuna_sampler, {}) for s in servers]
    )
    from runner.tune.ask_processes import AskProcessWarning

    with pytest.warns(AskProcessWarning, match="FileNotFoundError"):
        asker = Asker(study, 2, "on")
        _until(lambda: asker.processes is not None and asker.processes.failed is not None)
    try:
        assert asker.processes is not None and "FileNotFoundError" in str(asker.processes.failed)
        assert not asker.remote and asker.ask().number == 0  # asked here
    finally:
        asker.close()


class _Clock:
    """A clock that each ask moves on by `ask_s`."""

    def __init__(self, ask_s: float) -> None:
        self.now, self.ask_s, self.calls = 0.0, ask_s, 0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls % 2 == 0:
            self.now += self.ask_s
        return self.now


class _Study:
    def __init__(self) -> None:
        self.servers_asked: list[int] = []

    def ask(self) -> Any:
        return None

    def ask_servers(self, count: int) -> list[AskServer]:
        self.servers_asked.append(count)
        return []  # nothing is started: the test sees the decision only


@pytest.mark.parametrize(
    ("mode", "ask_s", "run_s", "left", "starts"),
    [
        ("auto", 0.010, 0.002, 1000, True),  # asks set the pace, and many are left
        ("auto", 0.010, 0.030, 1000, False),  # two runs at once take longer than an ask: the workers set it
        ("auto", 0.010, 0.002, int(ask_process_count(2) * ASK_PROCESS_COST_S / 0.010) - 1, False),  # too few left
        ("off", 0.010, 0.002, 1000, False),
    ],
)
def test_auto_starts_the_processes_where_the_drivers_asks_set_the_pace(
    mode: str, ask_s: float, run_s: float, left: int, starts: bool
) -> None:
    study = _Study()
    asker = Asker(study, 2, mode, clock=_Clock(ask_s))  # type: ignore[arg-type]
    for _ in range(Asker.WINDOW):
        asker.ask()
        asker.ran(run_s, left)
    assert study.servers_asked == ([ask_process_count(2)] if starts else [])


def test_ask_processes_leave_half_the_cpus_to_the_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.tune import ask_processes

    for cpus, parallel, count in [(2, 2, 1), (1, 4, 1), (8, 2, 2), (8, 8, 4), (16, 1, 1)]:
        monkeypatch.setattr(ask_processes, "cpu_slots", lambda cpus=cpus: cpus)
        assert ask_process_count(parallel) == count


def test_a_study_with_ask_processes_stores_every_trial_with_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole study, its asks in processes (the driver's own asks slowed, so that the processes take
    over early): every trial COMPLETE with its run in the store and the run's objective as its value,
    most of them asked elsewhere."""
    import threading

    monkeypatch.setenv("CONVGRID_ASK_PROCESSES", "on")
    ask = Study.ask

    def slow(self: Study) -> Any:
        threading.Event().wait(0.1)
        return ask(self)

    monkeypatch.setattr(Study, "ask", slow)
    raw = ls_study("remote_study", n_trials=40, parallel=2, sampler={"name": "tpe", "seed": 0})
    (report,) = tune(raw, tmp_path, opts(), executor=LocalExecutor(workers=2))
    assert report.states == {"COMPLETE": 40}
    store = ResultStore(tmp_path)
    runs = {r["run_id"]: r for r in store.read_runs("least_squares", ["err_final"]).to_pylist()}
    trials = read_trials(store, "remote_study").to_pylist()
    assert len(trials) == 40
    for t in trials:
        assert math.isclose(t["value"], math.log10(runs[t["run_id"]]["err_final"]), rel_tol=1e-12)
    creators = _creators(tmp_path)
    assert len(creators) == 40 and len(set(creators)) >= 2  # the driver first, then the processes
    assert sum(c != creators[0] for c in creators) >= 20
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".lock")]  # the journal's lock was released


def test_closing_before_a_process_has_opened_the_study_warns_of_nothing(tmp_path: Path) -> None:
    """A study that ends before its ask processes are up (a short one with `on`) closes them quietly."""
    import warnings

    study = _study(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an AskProcessWarning here would fail the test
        processes = AskProcesses(study.ask_servers(1))
        processes.close()
        assert processes.failed is None


def test_a_process_that_cannot_start_leaves_the_asks_to_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.tune import ask_processes
    from runner.tune.ask_processes import AskProcessWarning

    monkeypatch.setattr(ask_processes.sys, "executable", str(tmp_path / "no-python"))
    study = _study(tmp_path)
    with pytest.warns(AskProcessWarning, match="could not start"):
        asker = Asker(study, 2, "on")
    try:
        assert not asker.remote and asker.ask().number == 0  # asked here
    finally:
        asker.close()


def test_a_study_on_an_rdb_asks_in_processes_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ask process opens the RDB by its URL (SQLite here: one file, shared under its lock)."""
    monkeypatch.setenv("CONVGRID_ASK_PROCESSES", "on")
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    asker_of: list[Asker] = []
    init = Asker.__init__

    def keep(self: Asker, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        asker_of.append(self)
        _until(lambda: self.processes is not None and self.processes.opened >= 1)  # asks there from the first

    monkeypatch.setattr(Asker, "__init__", keep)
    local: list[int] = []
    ask = Study.ask

    def counted(self: Study) -> Any:
        local.append(1)
        return ask(self)

    monkeypatch.setattr(Study, "ask", counted)
    raw = ls_study("rdb_remote", n_trials=12, parallel=2, sampler={"name": "tpe", "seed": 0})
    (report,) = tune(raw, tmp_path, opts(), executor=LocalExecutor(workers=2), storage=url)
    assert report.states == {"COMPLETE": 12} and not local  # every trial asked in the process
    assert len(read_trials(ResultStore(tmp_path), "rdb_remote").to_pylist()) == 12
    (asker,) = asker_of
    assert asker.processes is None  # closed with the study, after it asked every trial there
