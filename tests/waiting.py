"""Waiting in a test for what another thread or process makes true, without asserting any timing."""

from __future__ import annotations

import threading
from collections.abc import Callable


def until(condition: Callable[[], bool], timeout_s: float, what: str, every_s: float = 0.01) -> None:
    """Return once `condition()` holds; fail the test naming `what` if it has not within `timeout_s`."""
    pause = threading.Event()  # never set: its wait is a sleep
    for _ in range(int(timeout_s / every_s)):
        if condition():
            return
        pause.wait(every_s)
    raise AssertionError(f"{what} never got there")
