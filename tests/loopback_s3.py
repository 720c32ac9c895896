"""An S3-compatible server (moto) on loopback, with a bucket, for tests and benchmarks: nothing leaves
127.0.0.1, and the test credentials are set only while it runs."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pyarrow.fs as pafs

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_bucket(bucket: str) -> Iterator[str]:
    """Start moto, create `bucket`, yield the URI of its prefix `{}` (to `.format` with a folder name)."""
    port = free_port()
    # moto from this interpreter's environment (a moto_server on PATH may be another install)
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        uri = f"s3://{bucket}/{{}}?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
        fs, _ = pafs.FileSystem.from_uri(uri.format("x") + "&allow_bucket_creation=true")
        fs.create_dir(bucket)
        yield uri
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
