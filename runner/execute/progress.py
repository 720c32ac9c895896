"""Progress for a grid: a tqdm bar on a terminal, plain periodic lines otherwise (logs, CI).

A terminal whose width is unknown or 0 (CI log capture, `script`, COLUMNS=0) also gets plain
lines: tqdm sizes its bar to the width and prints nothing at all when it is 0.

The rate and the ETA count from the first finished run, not from the start: the time before it is
start-up (Ray and its actors, minutes on a cold cluster), not a measure of how fast runs finish.
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from tqdm import tqdm

from tasks.status import ALL_STATUSES


def terminal_width(stream: TextIO) -> int:
    """The stream's terminal width in columns; 0 when unknown. COLUMNS wins when set (as in shutil)."""
    env = os.environ.get("COLUMNS")
    if env is not None:
        try:
            return max(int(env), 0)
        except ValueError:
            pass  # not a number: ask the terminal
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return 0


@dataclass
class Resumes:
    """Runs that did not start from step 0 (runner.execute.checkpointing): resumed from their own
    checkpoint or grown from a shorter run's final state, and the steps they did not compute again."""

    runs: int = 0
    steps: int = 0
    preempted: int = 0  # runs stopped by this command's preemption (saved, not stored: the next one resumes them)

    def add(self, rows: Sequence[dict[str, Any]]) -> None:
        for row in rows:
            step = row.get("resumed_from")
            if step:
                self.runs += 1
                self.steps += int(step)

    def text(self) -> str:
        said = [f"resumed {self.runs} (saved {self.steps:,} steps)" if self.runs else ""]
        said.append(f"preempted {self.preempted} (saved; the next command resumes them)" if self.preempted else "")
        return "; ".join(filter(None, said))


class Progress:
    def __init__(
        self,
        total: int,
        label: str,
        stream: TextIO | None = None,
        every_s: float = 10.0,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
        resumes: Resumes | None = None,
    ) -> None:
        self.resumes = resumes if resumes is not None else Resumes()
        self.stream = stream or sys.stderr
        self.total = total
        self.label = label
        self.counts: Counter[str] = Counter()
        self.clock = clock
        self.t0 = clock()
        self.every_s = every_s
        self.last_line = self.t0
        self.enabled = enabled and total > 0
        self.tty = self.stream.isatty() and terminal_width(self.stream) > 0
        self.first: tuple[float, int] | None = None  # (time, runs) of the first finished chunk
        # The bar is made at the first result, so that its clock (tqdm's rate and ETA) starts there.
        self.bar: Any = None

    @property
    def done(self) -> int:
        return sum(self.counts.values())

    def update(self, statuses: list[str]) -> None:
        self.counts.update(statuses)
        if self.first is None:
            self.first = (self.clock(), self.done)
            if self.enabled and self.tty:
                # initial=: the runs of the first chunk finished during start-up; tqdm leaves them out of its rate.
                self.bar = tqdm(
                    total=self.total,
                    initial=self.done,
                    desc=self.label,
                    file=self.stream,
                    unit="run",
                    dynamic_ncols=True,
                )
                self.bar.set_postfix_str(self._counts())
                return
        if self.bar is not None:
            self.bar.set_postfix_str(self._counts(), refresh=False)
            self.bar.update(len(statuses))
        elif self.enabled and self.clock() - self.last_line >= self.every_s:
            self.last_line = self.clock()
            print(self.line(), file=self.stream, flush=True)

    def _counts(self) -> str:
        counts = [f"{k}={self.counts[k]}" for k in ALL_STATUSES if self.counts[k]]
        return " ".join([*counts, self.resumes.text()] if self.resumes.text() else counts)

    def rate(self) -> float:
        """Runs per second since the first finished run (0 until a second chunk has finished)."""
        if self.first is None:
            return 0.0
        t_first, n_first = self.first
        elapsed = self.clock() - t_first
        return (self.done - n_first) / elapsed if elapsed > 0 else 0.0

    def line(self) -> str:
        now = self.clock()
        rate = self.rate()
        eta = f"{(self.total - self.done) / rate:.0f}s" if rate > 0 else "?"
        startup = f" (start-up {self.first[0] - self.t0:.0f}s)" if self.first is not None else ""
        return (
            f"{self.label}: {self.done}/{self.total} {self._counts()} | {rate:.2f} run/s | "
            f"elapsed {now - self.t0:.0f}s{startup} | eta {eta}"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
