"""A record the store cannot take never takes others with it: 99 good runs stored on the first try,
the poison one stored as `failed` with the reason, and the rerun does nothing more."""

from __future__ import annotations

from pathlib import Path

from runner import ResultStore, run_grid
from tests.options import opts

GRID = {
    "name": "poisoned",
    "blocks": [
        {"task": "faulty", "product": {"x": [float(i) for i in range(99)]}},
        {"task": "faulty", "params": {"x": 1000.0, "poison": True}},
    ],
}


def test_one_unwritable_record_is_stored_as_failed_and_the_rest_are_kept(tmp_path: Path) -> None:
    report = run_grid(GRID, tmp_path, opts(flush_every=1000))  # one buffer holds all 100
    assert report.counts == {"ok": 99, "failed": 1}
    runs = ResultStore(tmp_path).read_runs("faulty").to_pandas()
    assert len(runs) == 100 and (runs["status"] == "ok").sum() == 99
    bad = runs[runs["status"] == "failed"].iloc[0]
    assert bad["x"] == 1000.0 and bad["poison"]
    assert "the store could not take this run's results" in bad["error"]
    kept = ("version", "wall_s", "started", "finished", "host", "device", "code_version", "packages")
    assert all(bad[c] is not None and bad[c] == bad[c] for c in kept), bad[list(kept)]  # how it ran stays
    again = run_grid(GRID, tmp_path, opts())
    assert again.executed == 0 and again.skipped_failed == 1
