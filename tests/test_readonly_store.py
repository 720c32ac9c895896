"""A store on a read-only filesystem (an archive, a colleague's results mounted read-only) is readable:
`status`, `check`, `report` (written elsewhere) and `analysis.load` answer, and nothing tries to create
`_store/lock`. One with an unfinished transaction is read as of its committed state, with a note that
recovery was left for a command that can write.

The root is made read-only for real: a read-only bind mount in a mount namespace of the command's own
(root, with unshare), else permission bits (any other user)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runner import run_grid
from tests.conftest import REPO, files_under
from tests.options import opts

GRID = {
    "name": "archived",
    "blocks": [
        {
            "task": "least_squares",
            "params": {"d_in": 4, "d_out": 2, "m": 12, "n_iters": 10},
            "product": {"seed": [0, 1, 2]},
        }
    ],
}


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


@contextmanager
def read_only(root: Path) -> Iterator[list[str]]:
    """The prefix that runs a command with `root` read-only."""
    if os.geteuid() == 0:
        if not _can_unshare():
            pytest.skip("running as root without unshare(1): permission bits would not stop root")
        script = f'mount --bind "{root}" "{root}" && mount -o remount,ro,bind "{root}" "{root}" && exec "$@"'
        yield ["unshare", "-m", "sh", "-c", script, "sh"]
        return
    modes = {p: p.stat().st_mode for p in [root, *root.rglob("*")]}
    for path in modes:
        path.chmod(modes[path] & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        yield []
    finally:
        for path, mode in sorted(modes.items(), key=lambda item: len(item[0].parts)):
            path.chmod(mode)


def _convgrid(prefix: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "runner.cli", *args], capture_output=True, text=True, env=env, check=False
    )


def _snapshot(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in files_under(root)}


def test_status_check_report_and_analysis_read_a_read_only_store(tmp_path: Path) -> None:
    root = tmp_path / "results"
    run_grid(GRID, root, opts())
    (root / "_store" / "lock").unlink(missing_ok=True)  # as copied without it, or never written there
    before = _snapshot(root)
    out = tmp_path / "report"
    with read_only(root) as prefix:
        status = _convgrid(prefix, "status", str(root))
        check = _convgrid(prefix, "check", str(root))
        report = _convgrid(prefix, "report", str(root), "--out", str(out))
        load = subprocess.run(
            [
                *prefix,
                sys.executable,
                "-c",
                f"import analysis; print(len(analysis.load({str(root)!r}, 'least_squares')))",
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
        )
    assert status.returncode == 0, status.stderr
    assert "least_squares" in status.stdout and "3" in status.stdout
    assert check.returncode == 0, check.stderr
    assert report.returncode == 0, report.stderr
    assert (out / "report.html").is_file()
    assert load.returncode == 0 and load.stdout.strip() == "3", load.stderr
    assert _snapshot(root) == before


def test_a_read_only_store_with_an_unfinished_transaction_reads_its_committed_state(tmp_path: Path) -> None:
    root = tmp_path / "results"
    run_grid(GRID, root, opts())
    # a writer that died after staging a part of a transaction it never committed
    staging = root / "_store" / "staging"
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "part-dead-writer.parquet").write_bytes(b"half a part")
    before = _snapshot(root)
    with read_only(root) as prefix:
        status = _convgrid(prefix, "status", str(root))
    assert status.returncode == 0, status.stderr
    assert "least_squares" in status.stdout
    assert "read-only" in status.stderr and "not recovered" in status.stderr, status.stderr
    assert _snapshot(root) == before
