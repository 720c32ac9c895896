"""Optuna's JournalFileBackend, whose every append first checks the file's last line under the
journal's lock and cuts a torn one (runner.tune.journal_tail): appending after a torn line made the
journal unreadable for good. Part of the tuner's door to Optuna (runner.tune.optuna_adapter)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from runner.tune.journal_lock import journal_lock
from runner.tune.journal_tail import repair_tail


def journal_backend(path: Path) -> Any:
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

    class RepairingJournal(JournalFileBackend):
        def __init__(self, file_path: str, lock: Any) -> None:
            super().__init__(file_path, lock_obj=lock)
            # our own references to what we handed in: Optuna keeps them in private attributes
            self.journal_path, self.journal_lock = file_path, lock

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            # Optuna's own append (one write of whole lines, fsynced), with the tail checked under the lock
            text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs)
            self.journal_lock.acquire()
            try:
                repair_tail(self.journal_path)
                with open(self.journal_path, "ab") as handle:
                    handle.write(text.encode("utf-8"))
                    handle.flush()
                    os.fsync(handle.fileno())
            finally:
                self.journal_lock.release()

    # Optuna's lock file and grace; a wait for it says so (runner.tune.journal_lock)
    return RepairingJournal(str(path), journal_lock(str(path), JournalFileSymlinkLock))
