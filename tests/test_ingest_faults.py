"""Workers write, the driver commits (issue 27): real SIGKILLs at every new step, on a local root and on
the loopback S3. Nothing lost, nothing doubled, nothing half-visible:

  - a worker killed after it staged curve rows and before its manifest reached the driver;
  - a driver killed with manifests received and not committed (before its commit point), and one
    killed after its commit point, before the workers' parts were published;
  - a staged part whose manifest never comes: the driver's own cleaning when it ends, the sweep of a
    dead local driver's session, and, for a driver that may live on another host, the grace period
    (`recover` and `compact`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest
import yaml

from runner import RayExecutor, ResultStore, run_grid
from runner.store import incoming
from runner.store.compact import compact
from runner.store.txn import INCOMING_DIR
from tests.conftest import REPO
from tests.options import opts
from tests.test_object_store import s3_root  # noqa: F401 - the loopback S3 server, a fixture

pytestmark = [pytest.mark.ray, pytest.mark.faults]

N = 12
# credentials in the URI itself, as a user may give them: they reach the workers only inside the
# staging target, and nothing may print them
SECRET = "s3cr3t-ingest-7781"


def grid(name: str, witness: Path | None = None, sleep_s: float = 0.02) -> dict[str, object]:
    blocks: list[dict[str, object]] = [
        {"task": "faulty", "params": {"sleep_s": sleep_s}, "product": {"x": [float(i) for i in range(N)]}}
    ]
    if witness is not None:  # one more run, whose worker dies right after it next stages curve rows
        blocks.append({"task": "faulty", "params": {"x": 100.0, "die_staging": str(witness)}})
    return {"name": name, "blocks": blocks}


def s3_with_credentials(uri: str, prefix: str) -> str:
    return uri.replace("s3://convgrid/results", f"s3://ingest:{SECRET}@convgrid/{prefix}")


def physical(root: str, kind: str) -> pd.DataFrame:
    """What a plain client reads from a folder: every row of every part file."""
    fs, base = pafs.FileSystem.from_uri(root) if "://" in root else (pafs.LocalFileSystem(), root)
    return ds.dataset(f"{base}/{kind}/task=faulty", filesystem=fs, format="parquet").to_table().to_pandas()


def staged_files(root: str) -> list[str]:
    store = ResultStore(root)
    try:
        found = store.fs.get_file_info(pafs.FileSelector(store.files.abs(INCOMING_DIR), recursive=True))
    except FileNotFoundError:
        return []
    return [i.path for i in found if i.type == pafs.FileType.File]


def assert_each_run_once(root: str, runs: int) -> None:
    """runs/ one row per run, curves/ exactly each kept run's rows, attempts/ one attempt per run (no run
    was computed and committed twice), and nothing left staged."""
    rows = physical(root, "runs")
    assert len(rows) == rows["run_id"].nunique() == runs
    assert set(rows["status"]) == {"ok"}
    curves = physical(root, "curves")
    assert set(curves["run_id"]) == set(rows["run_id"]) and not curves.duplicated(["run_id", "step"]).any()
    assert len(curves) == rows["curve_rows"].sum() == runs  # the toy learner's curve is one row
    attempts = physical(root, "attempts")
    assert len(attempts) == attempts["run_id"].nunique() == runs
    assert staged_files(root) == []


def _worker_killed_after_staging(root: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    witness = tmp_path / "died"
    pool = RayExecutor(workers=2)
    try:
        report = run_grid(grid("worker_killed", witness), root, opts(flush_s=0.2), executor=pool)
    finally:
        pool.close()
    assert witness.exists()  # a worker really died between staging and its manifest
    assert pool.chunks_resubmitted >= 1 and report.counts == {"ok": N + 1}
    assert_each_run_once(root, N + 1)
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err + report.line()


def test_a_worker_killed_after_staging_loses_and_doubles_nothing(
    tmp_path: Path, ray_local: object, capsys: pytest.CaptureFixture[str]
) -> None:
    _worker_killed_after_staging(str(tmp_path / "results"), tmp_path, capsys)


@pytest.mark.services
def test_a_lost_worker_s_staged_parts_on_s3_lose_and_double_nothing(
    s3_root: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    ray_local: object,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _worker_killed_after_staging(s3_with_credentials(s3_root, "worker_killed"), tmp_path, capsys)


def _killed_driver(root: str, tmp_path: Path, phase: str) -> subprocess.CompletedProcess[str]:
    """`convgrid run` on Ray with two actors in a process of its own, SIGKILLed at `phase` of its first
    flush (tests/kill_at.py): its actors staged the curves of the records it holds."""
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid("driver_killed", sleep_s=0.05)))
    args = ["run", str(path), "--results", root, "--executor", "ray", "--workers", "2", "--no-progress"]
    killed = subprocess.run(
        [sys.executable, "-m", "tests.kill_at", f"flush:{phase}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert SECRET not in killed.stdout + killed.stderr
    return killed


@pytest.mark.parametrize("phase", ["staged", "marked"])
def test_a_driver_killed_with_manifests_in_hand_loses_and_doubles_nothing(
    tmp_path: Path, ray_local: object, phase: str
) -> None:
    """`staged`: the flush's own parts written, no marker: its records are lost and run again, their
    workers' parts are a dead driver's orphans. `marked`: committed, nothing published: the next command
    publishes the workers' parts where they lie, and runs nothing twice."""
    root = str(tmp_path / "results")
    _killed_driver(root, tmp_path, phase)
    left = staged_files(root)
    assert left  # the workers' parts of the killed flush lie in the dead driver's session
    store = ResultStore(root)
    seen = store.read_runs("faulty").num_rows if store.tasks() else 0  # what readers see: a pure read
    assert (seen == 0) == (phase == "staged")  # the killed flush was the first: committed only if marked
    again = run_grid(grid("driver_killed", sleep_s=0.05), root, opts())
    assert again.executed == N - seen
    assert_each_run_once(root, N)


def test_an_orphan_of_a_driver_on_another_host_goes_only_after_the_grace_period(
    tmp_path: Path, ray_local: object
) -> None:
    """A session one look cannot tell dead from slow (its driver's host is not this one) is kept while
    young, whatever commands run; the sweep of `recover` and `compact` take its parts once they are older
    than the grace period."""
    root = str(tmp_path / "results")
    _killed_driver(root, tmp_path, "staged")
    (session,) = (tmp_path / "results" / INCOMING_DIR).iterdir()
    stamp, _pid, _host = session.name.split(".", 2)
    elsewhere = session.with_name(f"{stamp}.1.some-other-host")
    session.rename(elsewhere)
    orphans = [p for p in elsewhere.rglob("*") if p.is_file()]
    assert orphans
    run_grid(grid("driver_killed", sleep_s=0.05), root, opts())
    compact(ResultStore(root))
    assert all(p.exists() for p in orphans)  # young: kept through a run and a compact
    rows = physical(root, "runs")
    assert len(rows) == rows["run_id"].nunique() == N  # invisible meanwhile, to readers and plain clients
    old = time.time() - incoming.STALE_INCOMING_S - 60
    for part in orphans:
        os.utime(part, (old, old))
    report = compact(ResultStore(root))
    assert report.orphans_removed == len(orphans) and not any(p.exists() for p in orphans)
    assert_each_run_once(root, N)


@pytest.mark.services
def test_a_driver_killed_on_s3_with_manifests_in_hand_loses_and_doubles_nothing(
    s3_root: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    ray_local: object,
) -> None:
    root = s3_with_credentials(s3_root, "driver_killed")
    _killed_driver(root, tmp_path, "staged")
    assert staged_files(root)
    run_grid(grid("driver_killed", sleep_s=0.05), root, opts())
    assert_each_run_once(root, N)
