"""Shared fixtures. Ray's environment must be set before anything imports ray: Ray binds to
127.0.0.1 and sends no usage statistics, so tests never talk to anything but loopback."""

from __future__ import annotations

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The fault-injection task lives in tests/; Ray workers and driver subprocesses inherit these.
os.environ["CONVGRID_LEARNERS"] = "faulty=tests.toy_learner"
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
# The validated-block and schema caches (runner/grid/cache.py) of this session only: a test never reads
# what an earlier session (or the user's ~/.cache) left, and never writes there.
os.environ["CONVGRID_CACHE"] = tempfile.mkdtemp(prefix="convgrid-test-cache-")

import pytest


@pytest.fixture(scope="module")
def ray_local() -> Iterator[object]:
    """One embedded Ray per test module (a start costs seconds), shut down afterwards."""
    from cluster import connect, shutdown_if_owned

    ray = connect(None, num_cpus=2)
    yield ray
    shutdown_if_owned()


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
