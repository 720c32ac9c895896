"""Progress for a grid: a tqdm bar on a terminal, plain periodic lines otherwise (logs, CI)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import TextIO

from tqdm import tqdm

from tasks.status import ALL_STATUSES


class Progress:
    def __init__(
        self, total: int, label: str, stream: TextIO | None = None, every_s: float = 10.0, enabled: bool = True
    ) -> None:
        self.stream = stream or sys.stderr
        self.total = total
        self.label = label
        self.counts: Counter[str] = Counter()
        self.t0 = time.monotonic()
        self.every_s = every_s
        self.last_line = self.t0
        self.enabled = enabled and total > 0
        self.tty = self.stream.isatty()
        self.bar = (
            tqdm(total=total, desc=label, file=self.stream, unit="run", dynamic_ncols=True)
            if self.enabled and self.tty
            else None
        )

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def update(self, statuses: list[str]) -> None:
        self.counts.update(statuses)
        if self.bar is not None:
            self.bar.set_postfix_str(self._counts(), refresh=False)
            self.bar.update(len(statuses))
        elif self.enabled and time.monotonic() - self.last_line >= self.every_s:
            self.last_line = time.monotonic()
            print(self.line(), file=self.stream, flush=True)

    def _counts(self) -> str:
        return " ".join(f"{k}={self.counts[k]}" for k in ALL_STATUSES if self.counts[k])

    def line(self) -> str:
        elapsed = time.monotonic() - self.t0
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        return (
            f"{self.label}: {self.done}/{self.total} {self._counts()} | {rate:.2f} run/s | "
            f"elapsed {elapsed:.0f}s | eta {eta:.0f}s"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
