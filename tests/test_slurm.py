"""`convgrid run GRID --slurm [SBATCH OPTIONS]` (cluster/slurm.py, cluster/slurm.sbatch) on a real SLURM:
slurmctld, slurmd and munged of Debian's slurm-wlm on loopback, one node, started by .ci/slurm.sh (CI
runs it; a test module here starts it itself where it runs as root with the binaries installed, and
stops what it started). Without SLURM the `services` tests skip, saying how to get one; the script's
rendering and the command's bad inputs are checked without it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.store import ResultStore
from tests.conftest import REPO

JOB_WAIT_S = 180.0


def _grid(tmp_path: Path, name: str, cells: int, **params: Any) -> Path:
    path = tmp_path / f"{name}.yaml"
    block = {"task": "faulty", "params": params, "product": {"x": [float(i) for i in range(1, cells + 1)]}}
    path.write_text(yaml.safe_dump({"name": name, "blocks": [block]}))
    return path


# ---- without SLURM ----------------------------------------------------------------------------------


def test_the_script_holds_the_command_its_sbatch_options_and_valid_bash(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from cluster.slurm import render

    text = render(
        ["run", "grid.yaml", "--results", "my results", "--workers", "2"],
        ["--nodes", "3", "--gpus-per-task=1", "-t", "1:00:00"],
        "fig3",
        "a test",
        tmp_path,
        ray=True,
        now=datetime(2026, 1, 2, tzinfo=UTC),
    )
    directives = re.findall(r"^#SBATCH (.*)$", text, re.M)
    assert "--nodes 3" in directives and "--nodes=1" not in directives  # the user's replaces the default
    assert {"--ntasks-per-node=1", "--requeue", "--signal=B:USR1@120", "--gpus-per-task=1", "-t 1:00:00"} <= set(
        directives
    )
    assert f"--output={tmp_path.resolve()}/fig3-%j.out" in directives
    assert "python -m runner.cli run grid.yaml --results 'my results' --workers 2" in text
    assert "{{" not in text
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


def test_slurm_with_address_or_without_sbatch_is_a_clear_error(
    tmp_path: Path, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    grid = _grid(tmp_path, "g", 2)
    results = tmp_path / "results"
    both = cli("run", str(grid), "--results", str(results), "--address", "auto", "--slurm")
    assert both.returncode == 2 and "--address" in both.stderr
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    missing = cli("run", str(grid), "--results", str(results), "--slurm", "--nodes=1")
    assert missing.returncode == 2 and "sbatch is not on PATH" in missing.stderr
    assert not (results / "slurm").exists() or not list((results / "slurm").iterdir())


def test_tune_with_slurm_writes_the_study_command_and_prints_the_job_id(
    tmp_path: Path, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `convgrid tune --slurm` hands sbatch, seen by a stand-in `sbatch` that records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sbatch"
    fake.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/sbatch-args\necho "4242;cluster"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    from tests.test_tune_resume import STUDY

    study = tmp_path / "x_study.yaml"
    study.write_text(yaml.safe_dump(STUDY))
    results = tmp_path / "results"
    args = ("tune", str(study), "--results", str(results), "--n-trials", "3", "--slurm", "--partition", "cpu")
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    (script,) = (results / "slurm").glob("x_study-*.sbatch")
    assert done.stdout.startswith(f"submitted SLURM job 4242: script {script}")
    assert (tmp_path / "sbatch-args").read_text().split() == ["--parsable", str(script)]
    text = script.read_text()
    assert f"python -m runner.cli tune {study} --results {results} --n-trials 3" in text
    assert "#SBATCH --partition cpu" in text and "convgrid tune of" in text
    refused = bin_dir / "sbatch"
    refused.write_text("#!/bin/sh\necho 'sbatch: error: invalid partition' >&2\nexit 1\n")
    failed = cli(*args)
    assert failed.returncode == 2 and "invalid partition" in failed.stderr
    assert len(list((results / "slurm").glob("*.sbatch"))) == 1  # the refused job's script is gone


# ---- on a real SLURM ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slurm() -> Iterator[str]:
    """SLURM_CONF of a running test cluster: CI's, or one this module starts with .ci/slurm.sh. Jobs go
    to .ci/slurm.sh's cluster only, never to a real one the environment names."""
    given = os.environ.get("SLURM_CONF")
    if given and shutil.which("sbatch"):
        if "ClusterName=convgrid-test" not in Path(given).read_text(errors="replace"):
            pytest.skip(f"SLURM_CONF ({given}) is not .ci/slurm.sh's test cluster: these tests submit jobs only there")
        yield given
        return
    if os.geteuid() != 0 or not shutil.which("slurmctld") or not shutil.which("munged"):
        pytest.skip('no SLURM: `eval "$(bash .ci/slurm.sh)"` installs and starts one (root, Debian)')
    started = subprocess.run(["bash", str(REPO / ".ci" / "slurm.sh")], capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    conf = started.stdout.strip().split("=", 1)[1]
    os.environ["SLURM_CONF"] = conf
    try:
        yield conf
    finally:
        subprocess.run(["bash", str(REPO / ".ci" / "slurm.sh"), "stop"], capture_output=True, timeout=60)
        del os.environ["SLURM_CONF"]


# the states a job ends in (squeue(1)); anything else may still change
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def _state(job: str) -> str:
    """The job's state; "" where scontrol did not answer (a busy controller: ask again)."""
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, timeout=60).stdout
    found = re.search(r"JobState=(\S+)", shown)
    return found.group(1) if found else ""


def _ended(job: str) -> bool:
    return _state(job) in ENDED


def _wait_for(what: str, check: Callable[[], bool], timeout_s: float = JOB_WAIT_S) -> float:
    """Seconds until `check()` held, polled every 0.1 s; fails after `timeout_s`."""
    t0 = time.monotonic()
    while not check():
        assert time.monotonic() - t0 < timeout_s, f"waited {timeout_s:g} s for {what}"
        time.sleep(0.1)
    return time.monotonic() - t0


def _stored(results: Path) -> int:
    if not (results / "runs").exists():
        return 0
    return ResultStore(results).read_runs("faulty", columns=["status"]).num_rows


def _submit(cli: Callable[..., Any], *args: str) -> str:
    submitted = cli(*args)
    assert submitted.returncode == 0, submitted.stderr
    found = re.match(r"submitted SLURM job (\d+): script (\S+), output (\S+)", submitted.stdout)
    assert found, submitted.stdout
    return found.group(1)


@pytest.mark.services
@pytest.mark.ray
def test_an_sbatched_grid_runs_to_the_end_on_ray_in_the_job(
    tmp_path: Path, slurm: str, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVGRID_SLURM_HEAD_IP", "127.0.0.1")  # the job's Ray binds loopback only
    grid = _grid(tmp_path, "slurm_grid", 6, sleep_s=0.05)
    results = tmp_path / "results"
    t0 = time.monotonic()
    job = _submit(cli, "run", str(grid), "--results", str(results), "--no-progress", "--slurm", "--time=5:00")
    first = _wait_for("the first stored run", lambda: _stored(results) > 0 or _ended(job))
    _wait_for(f"job {job} to end", lambda: _ended(job))
    output = (results / "slurm" / f"slurm_grid-{job}.out").read_text()
    assert _state(job) == "COMPLETED", output
    print(f"submission to first stored run: {first:.1f} s; to the job's end: {time.monotonic() - t0:.1f} s")
    runs = ResultStore(results).read_runs("faulty", columns=["status"])
    assert runs.num_rows == 6 and set(runs["status"].to_pylist()) == {"ok"}
    assert "slurm_grid: ran 6 of 6 cells" in output and "driver exit 0" in output
    (script,) = (results / "slurm").glob("slurm_grid-*.sbatch")
    assert "#SBATCH --time=5:00" in script.read_text()


@pytest.mark.services
def test_a_job_signalled_mid_grid_is_requeued_and_stores_every_run_once(
    tmp_path: Path, slurm: str, cli: Callable[..., Any]
) -> None:
    """The time limit's warning (--signal=B:USR1@S, here sent at once with scancel): the script stops the
    driver with SIGTERM, which commits what finished and exits 143, and requeues the job; its second
    start skips the stored runs and runs the rest. Every run is stored once and computed to its end once
    (the learner's ledger, outside the store)."""
    ledger = tmp_path / "ledger"
    grid = _grid(tmp_path, "slurm_requeue", 12, sleep_s=0.4, ledger=str(ledger))
    results = tmp_path / "results"
    job = _submit(
        cli, "run", str(grid), "--results", str(results), "--executor", "local", "--no-progress",
        "--flush-every", "1", "--slurm", "--time=5:00",
    )  # fmt: skip
    _wait_for("three stored runs", lambda: _stored(results) >= 3)
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
    # SLURM holds a requeued job back (its BeginTime, about two minutes): let it start now
    _wait_for(f"job {job} requeued", lambda: _state(job) == "PENDING")
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)
    _wait_for(f"job {job} to end", lambda: _ended(job))
    output = (results / "slurm" / f"slurm_requeue-{job}.out").read_text()
    assert _state(job) == "COMPLETED", output
    assert "(start 1)" in output and "(start 2)" in output
    assert "the driver stopped (exit 143) and the job is requeued" in output
    first_start = output.split("(start 2)")[0]
    assert "stopped by SIGTERM; finished runs are in the store" in first_start
    store = ResultStore(results)
    runs = store.read_runs("faulty", columns=["status", "x"])
    assert sorted(runs["x"].to_pylist()) == [float(i) for i in range(1, 13)]
    assert set(runs["status"].to_pylist()) == {"ok"}
    assert store.read_attempts("faulty").num_rows == 12  # no run stored twice
    computed = sorted(float(line.split()[0]) for line in ledger.read_text().splitlines())
    assert computed == [float(i) for i in range(1, 13)]  # none computed to its end twice
