"""How the `convgrid` command's process ends: as `sys.exit` would, minus the interpreter's teardown.

A process that has imported torch spends about half a second after its last exit hook tearing the
interpreter down (freeing torch's module graph and running its C++ static destructors): `python -c
"import torch"` takes 1.63 s, 1.11 s when it ends with `os._exit`; with Ray stopped as well, 0.79 s
passed between the command's last exit hook and its exit, 0.04 s with `os._exit` (2026-11-27, the
project's 2-core machine). None of that teardown leaves anything behind that a user keeps: by then the
command has committed its results, stopped what it started, and closed its files.

So the command line ends the way the interpreter would up to that point, and then stops: it waits for
the threads that are not daemons (after telling idle thread pools to end, as the interpreter does first),
runs every exit hook (Ray's, logging's, multiprocessing's), flushes standard output and error, and calls
`os._exit` with the command's code.
Only the console entry points do this (`convgrid`, `python -m runner.cli`); `runner.cli.main`, which
tests and notebooks call, returns as usual.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from typing import NoReturn


def interpreter_exit_steps() -> tuple[Callable[[], None], Callable[[], None]] | None:
    """CPython's own two steps of a normal exit, in its order (Py_FinalizeEx): the threading module's exit
    hooks and the join of every thread that is not a daemon (`threading._shutdown`, which also tells idle
    concurrent.futures pools to end), then the atexit hooks, newest first (`atexit._run_exitfuncs`).

    Both are private to the interpreter, and nothing public does either: atexit has no public way to run its
    hooks, and the pools' exit hooks are registered with `threading._register_atexit`. So they are reached
    here and nowhere else, and None where an interpreter lacks them: the command then exits as `sys.exit`
    does, slower by the teardown and otherwise the same. tests/test_process_exit.py fails on the pinned
    Python where either is gone, so an upgrade says so instead of quietly losing the half second."""
    shutdown = getattr(threading, "_shutdown", None)
    run_exit_hooks = getattr(atexit, "_run_exitfuncs", None)
    if callable(shutdown) and callable(run_exit_hooks):
        return shutdown, run_exit_hooks
    return None


def exit_process(code: int) -> NoReturn:
    """End this process with `code` after what a normal exit does for the user: joined threads, exit hooks,
    flushed streams."""
    steps = interpreter_exit_steps()
    if steps is None:
        sys.exit(code)
    for step in steps:
        step()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed stream, a reader that left (`... | head`)
            stream.flush()
    os._exit(code)
