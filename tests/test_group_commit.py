"""The group-commit writer (runner.store.group_commit): flushes that queue during a commit share the
next one, in order; drain waits for all; a commit's error reaches the submitting thread."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from runner.store.group_commit import GroupCommit


def test_flushes_queued_during_a_commit_share_the_next_one_in_order() -> None:
    started, release = threading.Event(), threading.Event()
    commits: list[list[int]] = []

    def commit(items: Sequence[int]) -> list[int]:
        started.set()
        release.wait()
        commits.append(list(items))
        return [i for i in items if i % 5 == 0]

    writer = GroupCommit(commit)
    writer.submit([0, 1])
    assert started.wait(5)  # the first commit holds [0, 1] ...
    for start in range(2, 12, 2):
        writer.submit([start, start + 1])  # ... while five more flushes queue
    release.set()
    assert writer.close() == [0, 5, 10]
    assert commits == [[0, 1], list(range(2, 12))]


def test_a_commit_error_is_raised_in_the_submitting_thread() -> None:
    def commit(items: Sequence[int]) -> list[int]:
        if -1 in items:
            raise OSError("disk full")
        return list(items)

    writer = GroupCommit(commit)
    writer.submit([1])
    assert writer.drain() == [1]
    writer.submit([-1])
    with pytest.raises(OSError, match="disk full"):
        writer.drain()
    writer.submit([2])  # the writer goes on after reporting it
    assert writer.close() == [2]
