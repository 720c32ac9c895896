"""The command line's process ends without the interpreter's teardown (runner.cli.process_exit), but only
after what a normal exit does for the user: idle thread pools told to end and threads that are not
daemons joined, exit hooks run in their order, buffered output flushed, the command's code kept. (The
console entry itself, `python -m runner.cli`, is exercised by every test that runs it: tests/test_spec.py
holds its exit code 2.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner.cli.process_exit import interpreter_exit_steps
from tests.conftest import REPO

SCRIPT = """
import atexit, sys, threading, time
from pathlib import Path
import runner.cli.process_exit as process_exit

if sys.argv[2] == "without-private-steps":  # as on an interpreter that lacks them: sys.exit's way
    process_exit.interpreter_exit_steps = lambda: None
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
process_exit.exit_process(3)
"""


def test_the_pinned_interpreter_has_its_exit_steps() -> None:
    """The fast exit reaches two private steps of CPython's exit; an upgrade that drops either must say so
    here (the command would still exit correctly, through sys.exit, half a second slower)."""
    assert interpreter_exit_steps() is not None, (
        f"Python {sys.version.split()[0]} lacks threading._shutdown or atexit._run_exitfuncs: "
        "runner.cli.process_exit now exits through sys.exit; find this version's equivalent or drop the fast exit"
    )


@pytest.mark.parametrize("way", ["fast", "without-private-steps"])
def test_exit_process_keeps_the_code_joins_threads_runs_hooks_and_flushes(tmp_path: Path, way: str) -> None:
    out = tmp_path / "order.txt"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), way], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered, no newline"
    assert out.read_text().splitlines() == [
        "a pool's task",
        "a thread that is not a daemon",
        "registered last, runs first",
        "registered first, runs last",
    ]
