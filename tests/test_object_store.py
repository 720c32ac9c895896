"""A results root on an object store: an S3-compatible server (moto) on loopback, with resume."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from runner import ResultStore, run_grid
from runner.cli import main
from runner.store.compact import compact

GRID = {
    "name": "s3",
    "blocks": [{"task": "least_squares", "params": {"n_iters": 200}, "product": {"lr": [0.01, 0.02, 9.0]}}],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def s3_root() -> Iterator[str]:
    port = _free_port()
    # moto from this interpreter's environment (a moto_server on PATH may be another install)
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        import pyarrow.fs as pafs

        uri = f"s3://convgrid/results?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
        fs, _ = pafs.FileSystem.from_uri(uri + "&allow_bucket_creation=true")
        fs.create_dir("convgrid")
        yield uri
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_run_resume_status_and_compact_on_s3(s3_root: str, capsys: pytest.CaptureFixture[str]) -> None:
    first = run_grid(GRID, s3_root, "local", progress=False)
    assert first.executed == 3 and first.counts == {"ok": 2, "diverged": 1}
    again = run_grid(GRID, s3_root, "local", progress=False)
    assert again.executed == 0
    store = ResultStore(s3_root)
    assert not store.local and store.tasks() == ["least_squares"]
    assert len(store.done_ids()) == 3
    curves_before = store.read_curves("least_squares").num_rows
    run_grid(
        {**GRID, "blocks": [{**GRID["blocks"][0], "product": {"lr": [0.01, 0.03]}}]}, s3_root, "local", progress=False
    )
    compact(store)
    assert len(store.done_ids()) == 4
    assert store.read_curves("least_squares").num_rows == curves_before + 200
    assert main(["status", s3_root]) == 0
    assert "s3" in capsys.readouterr().out
