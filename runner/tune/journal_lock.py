"""The Optuna journal's lock: Optuna's own JournalFileSymlinkLock (a symbolic link `<journal>.lock`,
the file optuna-dashboard and every other Optuna process use), with Optuna's grace and a wait that says
what it waits for.

The grace is how long the lock file may stand unchanged before a waiter breaks it. It was 5 s here, to
spare the driver after a SIGKILLed one a 30 s wait; but a live appender stalled longer than the grace
(an NFS fsync, a paused job) then lost the lock, and two appends interleaved, which the journal's tail
repair (runner.tune.journal_tail) cannot mend. So the grace is Optuna's own default (30 s, read from
the installed Optuna, never less), and a driver that finds the lock taken says so at once (and again
when it got it), naming the file and how long a silent holder is given: a wait is never silent.
"""

from __future__ import annotations

import errno
import inspect
import os
import time
import warnings
from collections.abc import Callable
from typing import Any

OPTUNA_GRACE_FLOOR_S = 30  # Optuna's default in every release this code knows


class JournalLockWait(UserWarning):
    """A driver waits for the Optuna journal's lock (another appender holds it, or a killed one left it)."""


def optuna_grace_s(lock_class: type) -> int:
    """The grace Optuna's JournalFileSymlinkLock (`lock_class`) breaks a lock after by default (30 s in
    Optuna 3 to 5), never less than OPTUNA_GRACE_FLOOR_S."""
    default = inspect.signature(lock_class).parameters["grace_period"].default
    return max(OPTUNA_GRACE_FLOOR_S, int(default) if isinstance(default, int) else 0)


def _warn(message: str) -> None:
    warnings.warn(message, JournalLockWait, stacklevel=4)


def journal_lock(path: str, lock_class: type, say: Callable[[str], None] = _warn) -> Any:
    """Optuna's symlink lock (`lock_class`: optuna.storages.journal.JournalFileSymlinkLock, handed in
    by runner.tune.optuna_journal: only the adapter's modules import Optuna) of the journal at `path`,
    with Optuna's grace, telling `say` of every wait."""

    class SayingLock(lock_class):
        lock_path = f"{path}.lock"  # Optuna's lock file: <journal>.lock

        def acquire(self) -> bool:
            try:
                os.symlink(path, self.lock_path)  # free: what Optuna's acquire does first, without its wait
                return True
            except FileExistsError:
                pass
            except OSError as exc:
                if exc.errno != errno.EEXIST:
                    raise
            grace = self.grace_period
            say(
                f"convgrid: waiting for the Optuna journal's lock {self.lock_path}: another appender holds it (or a "
                f"killed one left it); it is broken once it has stood unchanged for {grace} s"
            )
            started = time.monotonic()
            got = bool(super().acquire())
            say(f"convgrid: got the Optuna journal's lock {self.lock_path} after {time.monotonic() - started:.1f} s")
            return got

    return SayingLock(path, grace_period=optuna_grace_s(lock_class))
