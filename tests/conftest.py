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

import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parent.parent
# The fault-injection task lives in tests/; Ray workers and driver subprocesses inherit these.
os.environ["CONVGRID_LEARNERS"] = "faulty=tests.toy_learner"
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
# The validated-block and schema caches (runner/grid/cache.py) of this session only: a test never reads
# what an earlier session (or the user's ~/.cache) left, and never writes there.
os.environ["CONVGRID_CACHE"] = tempfile.mkdtemp(prefix="convgrid-test-cache-")

import pytest

if TYPE_CHECKING:
    from runner.execute.options import ExecutionOptions
    from runner.store import ResultStore


SLOW_TIERS = ("ray", "faults", "services")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the module's embedded Ray is in the `ray` tier, wherever it lives. Then the files
    with slow-tier tests run first (each file keeps its own order): `make test-all`'s workers take whole
    files in this order, and long files started last would leave one worker alone at the end."""
    for item in items:
        if "ray_local" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)
    slow_files = {item.path for item in items if any(item.get_closest_marker(m) for m in SLOW_TIERS)}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: collection order otherwise


@pytest.fixture(scope="module")
def ray_local() -> Iterator[object]:
    """One embedded Ray per test module (a start costs seconds), shut down afterwards."""
    from cluster import connect, shutdown_if_owned

    ray = connect(None, num_cpus=2)
    yield ray
    shutdown_if_owned()


def convgrid(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m runner.cli ARGS` in a fresh interpreter from the repository root, its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "runner.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def done_ids(store: ResultStore, task: str | None = None) -> set[str]:
    """Run ids whose newest row is final (ok or diverged): what a `run` never runs again."""
    from tasks.status import FINAL_STATUSES

    table = store.read_runs(task, columns=["status"])
    return {
        r for r, s in zip(table["run_id"].to_pylist(), table["status"].to_pylist(), strict=True) if s in FINAL_STATUSES
    }


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


@dataclass
class CliResult:
    """What a `convgrid` command gave: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """`convgrid ARGS` run in this process (runner.cli.main): the same code, exit code and messages as
    the command line, without an interpreter start-up and its imports per call (a second or more each,
    which CI's budget pays). Tests whose point is the process (signals, kills, several drivers at
    once, a fresh interpreter's imports) start real processes instead."""
    from runner.cli import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()  # what the test printed before is not this command's
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
        try:
            code = main(list(args))
        finally:
            for sig, handler in handlers.items():  # main() installs its own: pytest's come back
                signal.signal(sig, handler)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


def run_and_report(grids: list[Path], results: Path, out: Path) -> list[Path]:
    """The command line in process: `convgrid run` of each grid (local executor), then `convgrid report`
    into `out`; the PNGs the report drew."""
    from runner.cli import main

    for grid in grids:
        assert main(["run", str(grid), "--results", str(results), "--executor", "local", "--no-progress"]) == 0
    assert main(["report", str(results), "--out", str(out)]) == 0
    return list(out.rglob("*.png"))


def run_cell_by_cell(grid: dict[str, Any], root: Path, options: ExecutionOptions | None = None) -> None:
    """Run each cell of `grid` (blocks of one-key products, or single cells) as a `run_grid` of its own
    under the grid's name, so each run is committed as a part of its own: flushes of one `run_grid`
    that arrive while its writer thread commits share one part (runner.store.group_commit), which makes
    "a part per run" a matter of timing there. Fixtures that damage or compact single parts need it."""
    from runner import run_grid
    from tests.options import opts

    for block in grid["blocks"]:
        product = block.get("product") or {None: [None]}
        ((key, values),) = product.items()
        for value in values:
            params = {**block.get("params", {}), **({} if key is None else {key: value})}
            cell = {"task": block["task"], "params": params}
            run_grid({"name": grid["name"], "blocks": [cell]}, root, options or opts())
