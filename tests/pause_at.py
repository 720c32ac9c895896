"""A `convgrid` command that stops itself (SIGSTOP) in the middle of a commit on an object store: right
after its writers' lease was checked, before the commit point (the fenced commit record), the window a
lease alone cannot close (runner.coord.fenced_commits). Another process resumes it with SIGCONT.

    python -m tests.pause_at N WITNESS CONFLICTS convgrid-args...

stops at the check of its N-th flush commit (1 = the first), once, after writing its pid to WITNESS;
every commit refused by the fence (CommitConflict) appends a line to CONFLICTS.
"""

from __future__ import annotations

import os
import signal
import sys

from runner.coord.fenced_commits import CommitConflict, CommitLog
from runner.coord.lease_lock import LeaseLock
from runner.store import txn


def install(after: int, witness: str, conflicts: str) -> None:
    checks, armed = [0], [False]
    check, seal = LeaseLock.check, CommitLog.seal

    def arm(phase: str, label: str) -> None:
        if (phase, label) == ("staged", "flush"):  # the commit's lease check comes next (Transaction.commit)
            armed[0] = True

    def pausing_check(self: LeaseLock) -> None:
        check(self)
        if not armed[0]:
            return  # a check of a lock being taken, not of a commit
        armed[0] = False
        checks[0] += 1
        if checks[0] == after:
            with open(witness, "w") as handle:
                handle.write(f"{os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGSTOP)  # resumed by SIGCONT, its lease long gone

    def logging_seal(self: CommitLog, marker: bytes, then: object) -> None:
        try:
            seal(self, marker, then)  # type: ignore[arg-type]
        except CommitConflict as exc:
            with open(conflicts, "a") as handle:
                handle.write(f"{os.getpid()} {exc}\n")
            raise

    txn.PHASE_HOOKS.append(arm)
    LeaseLock.check = pausing_check  # type: ignore[method-assign]
    CommitLog.seal = logging_seal  # type: ignore[method-assign]


if __name__ == "__main__":
    from runner.cli import main

    install(int(sys.argv[1]), sys.argv[2], sys.argv[3])
    sys.exit(main(sys.argv[4:]))
