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
from datetime import datetime
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


def test_a_preemption_grace_that_outlasts_the_time_limit_warning_is_refused(
    tmp_path: Path, cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The time limit's signal (the template's B:USR1@120, or the user's) must leave the runs their grace:
    refused before anything is written or submitted (a stand-in sbatch that would record a submission)."""
    from cluster.slurm import warning_s

    assert warning_s([]) == 120.0 and warning_s(["--signal", "B:USR1"]) == 60.0
    assert warning_s(["--signal=B:USR1@600"]) == 600.0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ntouch {tmp_path}/submitted\necho 7\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    grid, results = _grid(tmp_path, "g", 2), tmp_path / "results"
    late = cli("run", str(grid), "--results", str(results), "--preempt-grace", "120", "--slurm", "--nodes=1")
    assert late.returncode == 2 and "--preempt-grace 120 s" in late.stderr and "120 s before it" in late.stderr
    bad = cli("run", str(grid), "--results", str(results), "--slurm", "--signal=B:USR1@soon")
    assert bad.returncode == 2 and "--signal=B:USR1@soon" in bad.stderr
    assert not (tmp_path / "submitted").exists() and not list(results.glob("slurm/*.sbatch"))
    longer = ("--preempt-grace", "120", "--slurm", "--signal=B:USR1@300")
    assert cli("run", str(grid), "--results", str(results), *longer).returncode == 0
    assert (tmp_path / "submitted").exists()


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


def _node_state() -> str:
    return subprocess.run(["sinfo", "-h", "-N", "-o", "%t"], capture_output=True, text=True, timeout=60).stdout.strip()


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


# A grid of checkpointable runs of about a second each on an idle machine (tests/test_checkpoint_runs.py's)
RESUME_TASK = "least_squares"
RESUME_RUNS = 4
RESUME_SPEC: dict[str, Any] = {
    "name": "slurm_resume",
    "blocks": [
        {
            "task": RESUME_TASK,
            "params": {"d_in": 8, "d_out": 2, "m": 30, "lr": 0.02, "tol": 1e-300, "n_iters": 20_000, "log_every": 500},
            "product": {"seed": list(range(RESUME_RUNS))},
        }
    ],
}


def _saved(results: Path) -> set[str]:
    """The checkpoint files held now, as run/file (a committed run's are deleted)."""
    from runner.store.checkpoints import CHECKPOINTS_DIR

    folder = results / CHECKPOINTS_DIR / RESUME_TASK / "runs"
    try:
        return {f"{run.name}/{f.name}" for run in folder.iterdir() for f in run.iterdir() if f.suffix == ".ckpt"}
    except FileNotFoundError:
        return set()


def _own(results: Path) -> tuple[Any, dict[str, Any]]:
    """The runs' own numbers (their summaries) and each run's curve, by run id, as pandas frames."""
    from tasks import get_task

    own = ["run_id", "status", "n_steps", "flops", "diverged_step", *get_task(RESUME_TASK).summary_fields]
    store = ResultStore(results)
    runs = store.read_runs(RESUME_TASK).select(own).to_pandas().sort_values("run_id").reset_index(drop=True)
    curves = store.read_curves(RESUME_TASK).to_pandas()
    by_run = {
        rid: curves[curves["run_id"] == rid].drop(columns=["run_id"]).sort_values("step").reset_index(drop=True)
        for rid in runs["run_id"]
    }
    return runs, by_run


@pytest.mark.services
def test_a_preempted_and_requeued_job_resumes_its_runs_from_their_checkpoints(
    tmp_path: Path, slurm: str, cli: Callable[..., Any]
) -> None:
    """Both ways SLURM stops a job to run it again, each caught while a run is half done and has saved:
    the time limit's warning (--signal=B:USR1@S, sent here at once with scancel), on which the script
    stops the driver with SIGTERM and requeues the job, and `scontrol requeue` (what a preemption with
    PreemptMode=REQUEUE does), on which SLURM sends SIGTERM to every process of the job and requeues it
    itself. Each time the driver's SIGTERM preempts its runs (runner.cli.preempt_or_terminate): the run in
    flight saves its state and stops unstored, the driver exits 143. The third start finishes the grid:
    every run stored once and ok, runs resumed from the step they saved (attempts' resumed_from), and the
    store, summaries and curves, bit for bit that of the grid run uninterrupted in process."""
    import threading

    from runner.execute.options import ExecutionOptions
    from runner.run.grid_run import run_grid

    alone = tmp_path / "alone"  # the grid uninterrupted, in process, while the job waits on SLURM
    options = ExecutionOptions(executor="local", progress=False, checkpoints=False)
    computing = threading.Thread(target=run_grid, args=(RESUME_SPEC, alone, options))
    computing.start()
    grid = tmp_path / "slurm_resume.yaml"
    grid.write_text(yaml.safe_dump(RESUME_SPEC))
    results = tmp_path / "results"
    t0 = time.monotonic()
    job = _submit(
        cli, "run", str(grid), "--results", str(results), "--executor", "local", "--no-progress",
        "--flush-every", "1", "--checkpoint-every", "0.2", "--slurm", "--time=5:00",
    )  # fmt: skip
    output = results / "slurm" / f"slurm_resume-{job}.out"

    def stored() -> int:
        return (
            ResultStore(results).read_runs(RESUME_TASK, columns=["status"]).num_rows
            if (results / "runs").exists()
            else 0
        )

    def restart() -> None:
        """Start the requeued job as soon as SLURM allows: it holds a requeued job back until its last
        start's credential expired (its BeginTime: cred_expire, 5 s in .ci/slurm.sh's cluster, 120 s by
        default; started sooner, its launch fails), then schedules it at its next pass: this asks now."""
        _wait_for(f"job {job} requeued", lambda: _state(job) == "PENDING")
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, timeout=60).stdout
        begin = datetime.fromisoformat(re.search(r"StartTime=(\S+)", shown).group(1))  # type: ignore[union-attr]
        _wait_for(f"job {job}'s BeginTime {begin}", lambda: datetime.now() > begin)
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)

    # start 1: the first run saved on its way, then the time limit's warning
    _wait_for("a run saving", lambda: bool(_saved(results)))
    subprocess.run(["scancel", "--signal=USR1", "--batch", job], check=True)
    restart()
    # start 2: a run stored and the next one saved by this start (a file not held before), then SLURM's requeue
    held = _saved(results)
    _wait_for("start 2 storing a run and saving the next", lambda: stored() >= 1 and bool(_saved(results) - held))
    subprocess.run(["scontrol", "requeue", job], check=True)
    restart()
    _wait_for(f"job {job} to end", lambda: _ended(job))
    took = time.monotonic() - t0
    text = output.read_text()
    assert _state(job) == "COMPLETED", text
    starts = re.split(r"convgrid: job \d+ \(start \d\)", text)[1:]
    assert len(starts) == 3, text
    for stopped in starts[:2]:  # the driver preempted, its runs saved and stopped
        assert "stopped by SIGTERM; finished runs are in the store and running ones saved their state" in stopped, text
        assert "driver exit 143" in stopped, text
    assert "the time limit is near; the driver stopped (exit 143) and the job is requeued" in starts[0]
    assert "driver exit 0" in starts[2], text
    ran = re.search(r"ran (\d+) of 4 cells .*; (\d+) were already done", starts[2])
    assert ran and int(ran[2]) >= 1 and int(ran[1]) + int(ran[2]) == RESUME_RUNS, text  # the stored not run again

    store = ResultStore(results)
    attempts = store.read_attempts(RESUME_TASK, ["resumed_from"]).to_pylist()
    assert len(attempts) == RESUME_RUNS, attempts  # every run stored once: no attempt stored failed or twice
    resumed = [a["resumed_from"] for a in attempts if a["resumed_from"]]
    assert resumed and all(0 < s < 20_000 for s in resumed), attempts
    print(f"the job's three starts: {took:.1f} s; {len(resumed)} runs resumed, {sum(resumed)} steps saved")
    assert not _saved(results), "a committed run's checkpoints are deleted"

    computing.join(JOB_WAIT_S)
    import pandas as pd

    runs, curves = _own(results)
    runs_alone, curves_alone = _own(alone)
    assert set(runs["status"]) == {"ok"}
    pd.testing.assert_frame_equal(runs, runs_alone, check_exact=True)  # NaN equals NaN; floats bit for bit
    assert curves.keys() == curves_alone.keys()
    for rid, curve in curves.items():
        pd.testing.assert_frame_equal(curve, curves_alone[rid], check_exact=True, obj=f"run {rid}'s curve")
