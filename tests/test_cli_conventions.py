"""Conventions of the command line: exit codes a script can act on, `--version`, the code version every
run records, and Optuna trials linked to their runs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from runner.execute import provenance
from runner.store import ResultStore
from runner.store.trials import read_trials
from runner.tune.optuna_adapter import open_storage
from tests.conftest import REPO, CliResult

Cli = Callable[..., CliResult]
# Depth-1 least squares (cond 3): lr 0.45 converges, lr 3.0 (> 2 / lambda_max) diverges.
LS = {"d_in": 10, "d_out": 2, "m": 40, "cond": 3.0, "n_iters": 100, "log_every": 5}


def write_yaml(path: Path, content: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(content))
    return str(path)


def run(cli: Cli, grid: str, root: Path, *extra: str) -> CliResult:
    return cli("run", grid, "--results", str(root), "--executor", "local", "--no-progress", *extra)


def test_run_exits_1_while_its_grid_holds_failed_runs_and_says_how_to_see_them(tmp_path: Path, cli: Cli) -> None:
    grid = write_yaml(
        tmp_path / "faults.yaml",
        {
            "name": "faults",
            "blocks": [
                {"task": "faulty", "product": {"x": [1.0, 2.0]}},
                {"task": "faulty", "params": {"x": 3.0, "fail": True}},
                {"task": "faulty", "params": {"x": 4.0, "sleep_s": 1.5}},  # stopped by --timeout
            ],
        },
    )
    root = tmp_path / "results"
    first = run(cli, grid, root, "--timeout", "0.3")
    assert first.returncode == 1
    assert first.stderr.splitlines() == [
        f"convgrid: faults runs: 1 failed, 1 timed out; `convgrid status {root}` lists them with their errors; "
        "--retry-failed runs them again"
    ]
    status = cli("status", str(root))
    assert status.returncode == 0 and "asked to fail with x=3" in status.stdout  # where the line points
    # A rerun leaves the failed runs alone, and says they are still there: the grid is not all good.
    again = run(cli, grid, root)
    assert again.returncode == 1 and "nothing to run" in again.stdout
    assert again.stderr.splitlines() == [
        f"convgrid: faults runs: 2 failed or timed out before (not run again); `convgrid status {root}` lists "
        "them with their errors; --retry-failed runs them again"
    ]
    # Run again on request, the bug fails again; the slow run, given time, is done.
    retried = run(cli, grid, root, "--retry-failed", "--timeout", "30")
    assert retried.returncode == 1 and retried.stderr.startswith("convgrid: faults runs: 1 failed;")


def test_run_exits_0_when_runs_only_diverged_and_when_every_cell_is_done(tmp_path: Path, cli: Cli) -> None:
    grid = write_yaml(
        tmp_path / "ls.yaml",
        {"name": "ls", "blocks": [{"task": "least_squares", "params": LS, "product": {"lr": [0.45, 3.0]}}]},
    )
    first = run(cli, grid, tmp_path / "results")
    assert (first.returncode, first.stderr) == (0, "")
    assert "diverged 1, ok 1" in first.stdout  # a diverging learner is a result, not a failure
    again = run(cli, grid, tmp_path / "results")
    assert (again.returncode, again.stderr) == (0, "") and "all 2 of 2 cells already done" in again.stdout


def test_tune_exits_1_when_trials_runs_failed_and_0_when_they_only_diverged(tmp_path: Path, cli: Cli) -> None:
    faulty = write_yaml(
        tmp_path / "faulty.yaml",
        {
            "name": "faults",
            "task": "faulty",
            "params": {"fail": True},  # every trial's run raises
            "space": {"x": {"type": "categorical", "choices": [1.0, 2.0]}},
            "objective": {"metric": "square"},
            "sampler": "grid",
        },
    )
    root = str(tmp_path / "results")
    failed = cli("tune", faulty, "--results", root, "--executor", "local", "--no-progress")
    assert failed.returncode == 1
    assert failed.stderr.splitlines() == [
        f"convgrid: faults runs: 2 failed; `convgrid status {root}` lists them with their errors; "
        "--retry-failed runs them again"
    ]
    steps = write_yaml(
        tmp_path / "steps.yaml",
        {
            "name": "steps",
            "task": "least_squares",
            "params": LS,
            "space": {"lr": {"type": "categorical", "choices": [0.45, 3.0]}},
            "objective": {"metric": "err_final", "log": True},
            "sampler": "grid",
        },
    )
    fine = cli("tune", steps, "--results", root, "--executor", "local", "--no-progress")
    assert (fine.returncode, fine.stderr) == (0, ""), fine.stderr
    assert "COMPLETE 1, PRUNED 1" in fine.stdout  # the diverged run: a pruned trial, not a failure


def test_each_trial_links_to_its_run_and_a_complete_one_costs_no_attribute_write(tmp_path: Path, cli: Cli) -> None:
    """trials/ names each trial's run (the cell of its params); the Optuna trial carries attributes only
    where its run was not ok (each is one more fsynced journal append per trial)."""
    steps = write_yaml(
        tmp_path / "steps.yaml",
        {
            "name": "linked",
            "task": "least_squares",
            "params": LS,
            "space": {"lr": {"type": "categorical", "choices": [0.3, 0.45, 3.0]}},
            "objective": {"metric": "err_final", "log": True},
            "sampler": "grid",
        },
    )
    root = tmp_path / "results"
    assert cli("tune", steps, "--results", str(root), "--executor", "local", "--no-progress").returncode == 0
    store = ResultStore(root)
    study = optuna.load_study(study_name="linked", storage=open_storage(None, store).optuna_storage)
    runs = {r["run_id"]: r for r in store.read_runs("least_squares", columns=["status", "lr"]).to_pylist()}
    rows = {r["number"]: r for r in read_trials(store, "linked").to_pylist()}
    assert len(study.trials) == 3
    for trial in study.trials:
        run = runs[rows[trial.number]["run_id"]]
        assert run["lr"] == trial.params["lr"]
        assert trial.user_attrs.get("run_status", "ok") == run["status"]
        assert "run_id" not in trial.user_attrs
        assert trial.user_attrs == {} if run["status"] == "ok" else set(trial.user_attrs) >= {"run_status"}


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="the tests run from an installed copy, not a checkout")
def test_version_prints_the_package_version_and_the_commit(
    cli: Cli, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.cli import main

    provenance.own_code_version.cache_clear()  # the tree as it is now
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    changed = bool(git("status", "--porcelain", "--untracked-files=no"))
    label = f"0.1.0+g{git('rev-parse', '--short=12', 'HEAD')}{'.dirty' if changed else ''}"  # what runs record
    expected = f"convgrid {label} ({REPO}{', with uncommitted changes' if changed else ''})"
    assert capsys.readouterr().out.splitlines() == [expected]


def commit_all(repo: Path) -> None:
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], check=True
    )


def test_code_version_names_a_checkouts_commit_and_its_uncommitted_changes(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "code.py").write_text("a = 1\n")
    commit_all(tmp_path)
    head = subprocess.run(
        ["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    clean = provenance.read_code_version(tmp_path)
    assert (clean.commit, clean.dirty, clean.label) == (head[:12], False, f"0.1.0+g{head[:12]}")
    (tmp_path / "new.py").write_text("untracked files are not the code that ran\n")
    assert not provenance.read_code_version(tmp_path).dirty
    (tmp_path / "code.py").write_text("a = 2\n")
    assert provenance.read_code_version(tmp_path).label == f"0.1.0+g{head[:12]}.dirty"


def no_git(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError(f"a git subprocess: {args}")


def test_code_version_says_when_the_code_is_no_checkout_without_starting_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(subprocess, "run", no_git)
    code = provenance.read_code_version(tmp_path)  # like site-packages: no .git beside the package
    assert code.label == "0.1.0 (commit unknown: not a git checkout)"
    assert code.describe() == "convgrid 0.1.0 (commit unknown: not a git checkout)"


def test_code_version_of_a_package_pip_installed_from_git_is_the_commit_pip_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = "89abcdef0123456789abcdef0123456789abcdef"
    record = {"url": "https://example.org/convgrid.git", "vcs_info": {"vcs": "git", "commit_id": commit}}

    class Installed:
        version = "0.1.0"

        def read_text(self, name: str) -> str | None:
            return json.dumps(record) if name == "direct_url.json" else None

    monkeypatch.setattr(provenance.metadata, "distribution", lambda name: Installed())
    code = provenance.read_code_version(tmp_path)
    assert code.label == "0.1.0+g89abcdef0123"
    assert code.describe() == "convgrid 0.1.0+g89abcdef0123 (installed by pip from https://example.org/convgrid.git)"


def test_code_version_is_found_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []
    real = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a) or real(*a, **k))
    provenance.own_code_version.cache_clear()
    labels = {provenance.code_version() for _ in range(100)}
    assert len(labels) == 1 and len(calls) == (1 if (provenance.ROOT / ".git").exists() else 0)


def test_a_worker_running_the_drivers_files_takes_its_code_version_without_git(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = provenance.CodeVersion("0.1.0", "0123456789ab", False, "the driver's checkout")
    own = provenance.CodeVersion("0.1.0", None, False, "not a git checkout")
    monkeypatch.setattr(provenance, "own_code_version", lambda: own)
    try:
        monkeypatch.setattr(subprocess, "run", no_git)
        provenance.adopt(provenance.Shipped(driver, provenance.files_key()))
        assert provenance.code_version() == "0.1.0+g0123456789ab"
        # Other files (another node, another container): the driver's commit may not be this code's.
        provenance.adopt(provenance.Shipped(driver, "another machine|mnt:[1]|/home/ray/convgrid"))
        assert provenance.code_version() == "0.1.0 (commit unknown: not a git checkout)"
    finally:
        provenance.adopt(None)


@pytest.mark.parametrize("command", ["report", "check", "status", "compact", "logs"])
def test_a_subcommand_that_reads_a_store_documents_its_positional_results_root(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`convgrid report --help` (and check, status, compact, logs) names the results root it reads (issue 45)."""
    from runner.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    shown = capsys.readouterr().out
    positional = shown.split("positional arguments:")[1].split("options:")[0]
    assert "RESULTS" in positional and "results root" in positional, shown
