"""Fault injection at the store's transaction phases (runner.store.txn.PHASE_HOOKS), installed by the
tests themselves: production code reads no environment variable for it.

    python -m tests.kill_at PHASE convgrid-args...     the command line, SIGKILLed when a transaction
                                                       reaches PHASE (or LABEL:PHASE: only transactions
                                                       of that label: flush, compact, merge, append)
    install("merge:published")                         the same in the test's own subprocess
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


if __name__ == "__main__":
    from runner.cli import main

    install(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
