"""Fault injection at the store's transaction phases (runner.store.txn.PHASE_HOOKS), installed by the
tests themselves: production code reads no environment variable for it.

    python -m tests.kill_at PHASE convgrid-args...     the command line, SIGKILLed when a transaction
                                                       reaches PHASE (or LABEL:PHASE: only transactions
                                                       of that label: flush, compact, merge, append)
    install("merge:published")                         the same in the test's own subprocess
    install_once("incoming:staged", witness)           once in all processes (a Ray worker that stages)
"""

from __future__ import annotations

import os
import signal
import sys

from runner.store import txn


def install(wanted: str) -> None:
    def die_at(phase: str, label: str) -> None:
        if wanted in (phase, f"{label}:{phase}"):
            os.kill(os.getpid(), signal.SIGKILL)  # as a power cut or `kill -9` would

    txn.PHASE_HOOKS.append(die_at)


def install_once(wanted: str, witness: str) -> None:
    """As `install`, but one process in all dies: the first to reach `wanted` creates the file `witness`
    and is SIGKILLed; any later one (the same run, run again after its worker died) goes on."""

    def die_once(phase: str, label: str) -> None:
        if wanted in (phase, f"{label}:{phase}"):
            try:
                with open(witness, "x") as seen:
                    seen.write(f"{os.getpid()}\n")
            except FileExistsError:
                return
            os.kill(os.getpid(), signal.SIGKILL)

    txn.PHASE_HOOKS.append(die_once)


if __name__ == "__main__":
    from runner.cli import main

    install(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
