"""No wait and no fallback is silent (issue 44): a study lease file that does not decode is reported at
once (a ~30 s silent wait before), and workers that cannot stage their curves under the root say that
the driver takes them."""

from __future__ import annotations

import errno
import warnings
from pathlib import Path

import pytest

from runner import ResultStore
from runner.coord.study_lease import GarbageLeaseWarning, StudyLease
from runner.execute import staging
from runner.execute.staging import StagingFallback, probe_nodes
from runner.fs.exclusive import LocalLink
from runner.fs.root import Root


def test_a_garbage_study_lease_file_is_reported_before_any_wait(tmp_path: Path) -> None:
    seen: list[str] = []

    class Clock:
        now = 0.0

        def __call__(self) -> float:
            return self.now

        def sleep(self, s: float) -> None:
            if not seen:
                seen.extend(str(w.message) for w in caught if issubclass(w.category, GarbageLeaseWarning))
                assert seen, "waited before saying why"
            self.now += s

    clock = Clock()
    lease = StudyLease(Root(ResultStore(tmp_path).fs, str(tmp_path)), LocalLink(), "s", "j", 2.0, clock, clock.sleep)
    garbage = tmp_path / lease.folder / "g000000000.json"
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"\x00\xffnot a lease")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lease.acquire(beat=False)
    assert seen and str(garbage) in seen[0] and "2 s" in seen[0]
    assert clock.now >= 2.0  # taken over once its beat stood still for a lease
    lease.release()


def test_a_full_incoming_folder_says_the_driver_takes_the_curves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(staging, "write_bytes", full)
    with pytest.warns(StagingFallback, match="No space left on device.*send their curve rows to the driver"):
        assert probe_nodes([], str(tmp_path), "_store/incoming/s.1.h") == frozenset()
