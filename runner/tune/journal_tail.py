"""The tail of an Optuna journal file, checked before every append.

Optuna's JournalFileBackend writes one JSON object per line and reads a torn last line (a driver
killed inside its write) as if it were not there, as long as it stays last. The next append glued its
record to that fragment, making a line that never decodes, and from then on every start failed with a
JSONDecodeError. So before each append, under the journal's own lock (runner.tune.optuna_adapter), a
last line that does not end in a newline or does not decode is cut; what was cut is kept beside the
journal (JOURNAL.torn-<time>-<pid>) and one warning says so. Only the last line can be torn: every
append is one write of whole lines, and the lock lets one writer append at a time.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import BinaryIO

BLOCK = 1 << 16


def _last_line_start(handle: BinaryIO, size: int) -> int:
    """Where the journal's last line starts: just after the newline before it (0 when there is none)."""
    end = size - 1  # a final newline belongs to the last line
    while end > 0:
        start = max(0, end - BLOCK)
        handle.seek(start)
        found = handle.read(end - start).rfind(b"\n")
        if found >= 0:
            return start + found + 1
        end = start
    return 0


def _decodes(line: bytes) -> bool:
    try:
        json.loads(line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError both
        return False
    return True


def repair_tail(path: str | os.PathLike[str]) -> int:
    """Cut a torn or undecodable last line of the journal at `path` (the caller holds its lock); keep
    what was cut beside it and warn. Returns how many bytes were cut."""
    with open(path, "rb+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size == 0:
            return 0
        start = _last_line_start(handle, size)
        handle.seek(start)
        tail = handle.read(size - start)
        if tail.endswith(b"\n") and _decodes(tail):
            return 0
        kept = Path(f"{path}.torn-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}")
        with open(kept, "wb") as copy:
            copy.write(tail)
            copy.flush()
            os.fsync(copy.fileno())
        handle.truncate(start)
        handle.flush()
        os.fsync(handle.fileno())
    warnings.warn(
        f"{path}: its last line was torn ({len(tail)} bytes, a driver stopped while writing it); cut, and kept "
        f"in {kept}",
        stacklevel=2,
    )
    return len(tail)
