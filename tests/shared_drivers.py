"""Two drivers on one grid and one store, one a `convgrid run` process SIGKILLed midway (runner.coord.claims).

The `faulty` learner appends '<x> <pid>' to a ledger file each time a run finishes: the witness,
outside the store, of what each driver computed (also what a killed driver computed and never stored).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from runner import ResultStore, run_grid
from runner.coord.claims import block_size
from runner.run.grid_run import RunReport
from tests.options import opts

REPO = Path(__file__).resolve().parents[1]


def ledger_grid(path: Path, n: int, ledger: Path, sleep_s: float = 0.0) -> Path:
    """A grid of n `faulty` cells that write to `ledger`, as a grid file (JSON is YAML)."""
    grid = {
        "name": "shared",
        "blocks": [
            {
                "task": "faulty",
                "params": {"sleep_s": sleep_s, "ledger": str(ledger)},
                "product": {"x": [float(i) for i in range(n)]},
            }
        ],
    }
    path.write_text(json.dumps(grid))
    return path


def read_ledger(ledger: Path) -> list[tuple[str, int]]:
    if not ledger.exists():
        return []
    lines = [line.split() for line in ledger.read_text().splitlines()]
    return [(x, int(pid)) for x, pid in lines if pid]  # a line being written has no pid yet


@dataclass
class Takeover:
    computed: dict[str, list[int]]  # cell x -> pids of the drivers that ran it
    first: int  # the killed driver's pid
    second: int  # the survivor's pid (this process)
    report: RunReport  # the survivor's
    runs: pa.Table
    attempts: pa.Table


def kill_one_driver_midway(
    tmp: Path,
    root: str,
    n: int,
    lease_s: float,
    kill_after: int,
    batch: bool = True,
    sleep_s: float = 0.002,
    flush_s: float = 2.0,
) -> Takeover:
    """Two drivers on one grid and store: a `convgrid run` process, and this process (a thread running
    `run_grid`, started once the other has paid its imports and finished a run, so both start on the
    work together). The first is SIGKILLed once it has computed `kill_after` runs and the second one;
    the second must finish the grid. Returns what the ledger and the store say. On a small grid, make
    runs slow enough (`sleep_s`) and unbatched that the first driver has not claimed every block (as
    fast as its executor asks for cells) by the time the second starts; and flush often enough
    (`flush_s`) that what the killed driver computed and had not committed stays within a wave."""
    ledger = tmp / "ledger"
    grid = ledger_grid(tmp / "grid.yaml", n, ledger, sleep_s=sleep_s)
    cmd = [sys.executable, "-m", "runner.cli", "run", str(grid), "--results", root, "--executor", "local"]
    options = ["--no-progress", "--lease", str(lease_s), "--flush-seconds", str(flush_s)]
    options += [] if batch else ["--no-batch"]
    first = subprocess.Popen([*cmd, *options], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reports: list[RunReport] = []
    errors: list[BaseException] = []

    def survive() -> None:
        try:
            same = opts(batch=batch, flush_s=flush_s)  # as the first driver's options
            reports.append(run_grid(str(grid), root, same, lease_s=lease_s))
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread, which fails on it
            errors.append(exc)

    second = threading.Thread(target=survive)
    try:
        deadline = time.monotonic() + 90
        while not second.is_alive():
            if any(pid == first.pid for _, pid in read_ledger(ledger)):
                second.start()
            assert first.poll() is None, f"the first driver ended early: {first.communicate()[0]!r}"
            assert time.monotonic() < deadline, "the first driver computed nothing"
            time.sleep(0.02)
        while True:
            by_pid = Counter(pid for _, pid in read_ledger(ledger))
            if by_pid[first.pid] >= kill_after and by_pid[os.getpid()] >= 1:
                break
            assert first.poll() is None, f"the first driver ended before the kill: {first.communicate()[0]!r}"
            assert time.monotonic() < deadline, f"no progress to kill at: {by_pid}"
            time.sleep(0.02)
        first.kill()
        first.wait()
        second.join(timeout=120)
        assert not second.is_alive() and not errors, errors
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    computed: dict[str, list[int]] = defaultdict(list)
    for x, pid in read_ledger(ledger):
        computed[x].append(pid)
    store = ResultStore(root)
    runs = store.read_runs("faulty", columns=["status", "x"])
    attempts = store.read_attempts("faulty", ["x"])
    return Takeover(dict(computed), first.pid, os.getpid(), reports[0], runs, attempts)


def check_takeover(seen: Takeover, n: int) -> None:
    """Every cell stored once; runs computed at most cells + what the killed driver had in flight."""
    computed, runs = seen.computed, seen.runs
    assert sorted(computed, key=float) == [f"{float(i):g}" for i in range(n)]  # every cell computed
    assert runs.num_rows == n and set(runs["status"].to_pylist()) == {"ok"}
    assert sorted(runs["x"].to_pylist()) == [float(i) for i in range(n)]
    # One attempt per cell in the history: the survivor never ran again a cell the killed one had stored.
    assert seen.attempts.num_rows == n
    both = {seen.first, seen.second}
    twice = {x: pids for x, pids in computed.items() if len(pids) > 1}
    assert all(sorted(pids) == sorted(both) for pids in twice.values())  # only a kill makes a second run
    # The cells run twice were in flight in the killed driver: at most its largest wave, the first
    # one of a driver alone (a quarter of the blocks).
    first_wave = math.ceil(math.ceil(n / block_size(n)) / 4) * block_size(n)
    assert len(twice) <= first_wave, (len(twice), first_wave)


def race_to_create(create: Callable[[str, bytes], bool], target: str, racers: int = 8) -> list[bytes]:
    """`racers` threads released together, each creating `target` with its own body through `create` (a
    create-if-absent primitive): the bodies of those told they won."""
    wins: list[bytes] = []
    barrier = threading.Barrier(racers)

    def race(i: int) -> None:
        barrier.wait()
        if create(target, f"driver {i}".encode()):
            wins.append(f"driver {i}".encode())

    threads = [threading.Thread(target=race, args=(i,)) for i in range(racers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return wins
