"""The command line's process ends without the interpreter's teardown (runner.cli.process_exit), but only
after what a normal exit does for the user: idle thread pools told to end and threads that are not
daemons joined, exit hooks run in their order, buffered output flushed, the command's code kept."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path
from runner.cli.process_exit import exit_process

out = Path(sys.argv[1])
def hook(name):
    with out.open("a") as f:
        f.write(name + "\\n")
atexit.register(hook, "registered first, runs last")
atexit.register(hook, "registered last, runs first")
def late():
    time.sleep(0.3)
    hook("a thread that is not a daemon")
threading.Thread(target=late).start()
from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(1)  # never shut down: its idle worker, not a daemon, is told to end at exit
pool.submit(hook, "a pool's task").result()
sys.stdout.write("buffered, no newline")
exit_process(3)
"""


def test_exit_process_keeps_the_code_joins_threads_runs_hooks_and_flushes(tmp_path: Path) -> None:
    out = tmp_path / "order.txt"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered, no newline"
    assert out.read_text().splitlines() == [
        "a pool's task",
        "a thread that is not a daemon",
        "registered last, runs first",
        "registered first, runs last",
    ]


def test_the_command_line_ends_with_its_code_and_output(tmp_path: Path) -> None:
    """`python -m runner.cli` goes through the same exit: a bad grid file is exit code 2 and one message."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nblocks:\n  - task: no_such_learner\n")
    done = subprocess.run(
        [sys.executable, "-m", "runner.cli", "run", str(bad), "--results", str(tmp_path / "r")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "no_such_learner" in done.stderr and not (tmp_path / "r").exists()
    listing = subprocess.run(
        [sys.executable, "-m", "runner.cli", "tasks"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert listing.returncode == 0 and "deep_linear" in listing.stdout, listing.stderr
