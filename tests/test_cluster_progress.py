"""Progress where cluster runs are watched: CI logs and `script` give a terminal of 0 columns (plain
lines, since tqdm prints nothing there), and the ETA leaves Ray's start-up out (a fake clock; no
wall-clock assertion)."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import struct
import termios
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

import pytest

from runner.execute.progress import Progress, terminal_width


@contextmanager
def _pty(columns: int) -> Iterator[tuple[TextIO, int]]:
    """A pseudo-terminal of `columns` columns: (writable end as a text stream, reading end's fd)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24 if columns else 0, columns, 0, 0))
    stream = open(slave, "w", buffering=1)  # noqa: SIM115 - closed below, with the master
    try:
        yield stream, master
    finally:
        stream.close()
        os.close(master)


def _read(master: int) -> str:
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 0.5)
        if not ready:
            return out.decode(errors="replace")
        chunk = os.read(master, 65536)
        if not chunk:
            return out.decode(errors="replace")
        out += chunk


def _drive(stream: TextIO) -> None:
    bar = Progress(total=6, label="grid", stream=stream, every_s=0.0)
    bar.update(["ok", "ok"])
    bar.update(["ok", "diverged"])
    bar.update(["ok", "ok"])
    bar.close()
    stream.flush()


@pytest.fixture
def no_columns_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)


def test_a_zero_column_terminal_gets_plain_lines(no_columns_env: None) -> None:
    with _pty(0) as (stream, master):
        assert stream.isatty() and terminal_width(stream) == 0
        _drive(stream)
        text = _read(master)
    lines = [line for line in text.replace("\r\n", "\n").split("\n") if line]
    assert len(lines) == 3 and lines[-1].startswith("grid: 6/6 ok=5 diverged=1 |"), text
    assert "\r" not in text.replace("\r\n", "\n")  # no bar redrawn in place


def test_columns_zero_in_the_environment_gets_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "0")
    with _pty(80) as (stream, master):
        assert terminal_width(stream) == 0
        _drive(stream)
        text = _read(master)
    assert text.replace("\r\n", "\n").rstrip().split("\n")[-1].startswith("grid: 6/6 ok=5 diverged=1 |")


def test_a_real_terminal_still_gets_the_bar(no_columns_env: None) -> None:
    with _pty(100) as (stream, master):
        assert terminal_width(stream) == 100
        _drive(stream)
        text = _read(master)
    assert "\r" in text.replace("\r\n", "\n") and "6/6" in text  # tqdm redraws its bar in place
    assert "grid: 6/6 ok=" not in text  # ... and no plain line


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_eta_excludes_start_up() -> None:
    clock, stream = FakeClock(), io.StringIO()
    bar = Progress(total=10, label="grid", stream=stream, every_s=1e9, clock=clock)
    clock.now = 100.0  # Ray and its actors took 100 s to start; the first chunk of 2 runs arrives
    bar.update(["ok", "ok"])
    clock.now = 110.0  # 2 more runs in the next 10 s: 0.2 run/s, 6 runs left
    bar.update(["ok", "ok"])
    line = bar.line()
    assert "0.20 run/s" in line and "eta 30s" in line, line  # counted from t = 0 it would say 165 s
    assert "elapsed 110s (start-up 100s)" in line
    assert Progress(total=3, label="g", stream=io.StringIO(), clock=clock).line().endswith("eta ?")
