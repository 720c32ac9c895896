"""Workers write, the driver commits (issue 27), on the module's embedded Ray: actors stage their runs'
curves, the driver builds no curve row and stores what the in-process executor stores; the start-up
probe finds which nodes reach the root, and a node that sees another disk is left to send its rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import runner.store.flush as flush
from runner import RayExecutor, ResultStore, run_grid
from runner.execute.base import WorkItem
from runner.execute.staging import answer_probe, probe_nodes
from runner.grid.spec import load_grid
from runner.store import incoming
from tests.conftest import files_under
from tests.options import opts
from tests.test_ingest_store import GRID
from tests.test_store_damage import content

pytestmark = pytest.mark.ray


def _count_driver_curve_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Curve rows the driver itself turns into Arrow (the actors are other processes: not counted)."""
    built = [0]
    original = flush.curve_table

    def counting(*args: Any, **kwargs: Any) -> Any:
        table = original(*args, **kwargs)
        built[0] += table.num_rows
        return table

    monkeypatch.setattr(flush, "curve_table", counting)
    return built


def test_actors_stage_the_curves_and_the_driver_builds_none(
    tmp_path: Path, ray_local: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_grid(GRID, tmp_path / "local", opts())
    built = _count_driver_curve_rows(monkeypatch)
    pool = RayExecutor(workers=2)
    try:
        report = run_grid(GRID, tmp_path / "ray", opts(), executor=pool)
    finally:
        pool.close()
    assert report.executed == 7 and built == [0]
    a, b = content(tmp_path / "local"), content(tmp_path / "ray")
    assert a.keys() == b.keys()
    for key in a:  # the same rows on disk whichever path they took (but where, when and in which commit)
        pd.testing.assert_frame_equal(a[key], b[key], check_exact=True, obj=key)
    assert files_under(tmp_path / "ray" / incoming.INCOMING_DIR) == []


def test_without_staging_every_curve_row_passes_through_the_driver(
    tmp_path: Path, ray_local: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = _count_driver_curve_rows(monkeypatch)
    pool = RayExecutor(workers=2, stage=False)
    try:
        run_grid(GRID, tmp_path, opts(), executor=pool)
    finally:
        pool.close()
    store = ResultStore(tmp_path)
    assert built[0] == sum(store.read_curves(t).num_rows for t in store.tasks()) > 0


def test_records_of_a_staging_pool_carry_a_part_and_no_curve(tmp_path: Path, ray_local: object) -> None:
    ResultStore(tmp_path).recover()
    pool = RayExecutor(workers=2)
    try:
        folder = pool.stage_to(str(tmp_path))
        assert folder is not None and pool.staging is not None and len(pool.staging.nodes) == 1
        items = [WorkItem(c.run_id, c.task, c.params_json()) for c in load_grid(GRID).cells]
        records = [r for batch in pool.execute(items) for r in batch]
    finally:
        pool.close()
    with_curves = [r for r in records if r.status != "failed"]
    assert len(records) == 7 and all(r.staged is not None and r.curve == {} for r in with_curves)
    for record in with_curves:
        assert record.staged is not None and record.staged.path.startswith(f"{folder}/")
        assert (tmp_path / record.staged.path).is_file()
        assert record.row["batch_id"] == record.staged.batch_id and record.row["curve_rows"] > 0


@pytest.fixture
def other_disk(tmp_path: Path, ray_local: object) -> Any:
    """An actor that stands for a node whose local paths are another machine's: the results root's path
    leads there to an empty folder of its own (what a local root on the driver's machine is elsewhere)."""
    import ray

    @ray.remote(num_cpus=0)
    class OtherNode:
        def __init__(self, disk: str) -> None:
            self.disk = disk

        def placement(self) -> tuple[str, str]:
            return "another-node", "cpu"

        def answer_probe(self, root: str, probe: str, reply: str) -> bool:
            return answer_probe(self.disk, probe, reply, "another-node")

    disk = tmp_path / "other-machine"
    disk.mkdir()
    actor = OtherNode.remote(str(disk))  # type: ignore[attr-defined]
    yield actor, disk
    ray.kill(actor)


def test_the_probe_finds_the_nodes_that_reach_the_root_and_writes_nothing_elsewhere(
    tmp_path: Path, other_disk: Any
) -> None:
    import ray

    actor, disk = other_disk
    root = tmp_path / "results"
    root.mkdir()
    pool = RayExecutor(workers=1)
    try:
        pool.start()
        here = ray.get(pool.actors[0].placement.remote())[0]
        folder = incoming.session_folder()
        assert probe_nodes([*pool.actors, actor], str(root), folder) == frozenset({here})
    finally:
        pool.close()
    assert files_under(disk) == []  # the other node created no folder and left no file
    assert files_under(root / folder) == []  # the probe and its replies are gone


def test_a_long_run_s_parts_are_merged_on_a_worker_while_it_runs(
    tmp_path: Path, ray_local: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each staged part is a file in curves/ until a merge, and a flush lists the folders it writes: a
    merge asked of the pool runs on a worker's node and merges them (the bytes read and written there),
    the commits of a run ask for merges (runner.execute.worker_merge.MergeCadence), and the stores read
    exactly as the in-process executor's."""
    import runner.execute.staging as staging
    import runner.execute.worker_merge as worker_merge

    monkeypatch.setattr(worker_merge, "MERGE_EVERY_S", 0.0)  # at every commit that finds none under way
    monkeypatch.setattr(staging, "STAGE_WAIT_S", 0.0)  # a part per run: many parts in curves/
    monkeypatch.setenv("CONVGRID_COMPACT_PARTS", "0")  # no merge during or after a run, until set below
    block = {"task": "faulty", "params": {"sleep_s": 0.02}, "product": {"x": [float(x) for x in range(40)]}}
    many = {"name": "merged", "blocks": [block]}
    run_grid(many, tmp_path / "local", opts())
    curves = tmp_path / "asked" / "curves" / "task=faulty"
    pool = RayExecutor(workers=2)
    try:
        run_grid(many, tmp_path / "asked", opts(), executor=pool)
        before = len(list(curves.glob("part-*.parquet")))
        assert pool.merges.reports == [] and before == 40  # a part per run, none merged
        assert pool.merge_on_worker(str(tmp_path / "asked"), 4)
        pool.merges.wait(120)  # done before the next run, which then asks for its own
        monkeypatch.setenv("CONVGRID_COMPACT_PARTS", "4")
        run_grid(many, tmp_path / "cadence", opts(flush_every=4, flush_s=0.1), executor=pool)
    finally:
        pool.close()  # collects the merge under way
    asked, *cadence = pool.merges.reports
    assert asked.startswith("merged ") and not asked.startswith("merged 0 "), asked
    assert len(list(curves.glob("part-*.parquet"))) < before
    assert cadence  # the run's commits asked for merges (the first one at its first commit)
    for root in ("asked", "cadence"):
        a, b = content(tmp_path / "local"), content(tmp_path / root)
        for key in a:
            pd.testing.assert_frame_equal(a[key], b[key], check_exact=True, obj=f"{root}: {key}")


def test_a_merge_still_running_at_close_is_cancelled_not_waited_for(ray_local: Any, tmp_path: Path) -> None:
    """`close` waits a bounded time for a merge on a worker, then cancels it: a command's end never
    hangs on one. The merge here is one that would run a minute."""
    import time

    import ray

    from runner.execute.worker_merge import WorkerMerges

    def slow(root: str, _max_parts: int) -> str:
        Path(root, "started").touch()
        time.sleep(60)
        return "merged"

    merges = WorkerMerges()
    merges._task = ray.remote(num_cpus=0, max_retries=0)(slow)
    assert merges.ask(frozenset({ray.get_runtime_context().get_node_id()}), str(tmp_path), 4)
    running = merges._under_way
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():  # running, not still being scheduled
        assert time.monotonic() < deadline
        time.sleep(0.05)
    t0 = time.monotonic()
    merges.wait(0.2)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        ray.get(running, timeout=30)  # cancelled: it ends now, not in a minute
    assert time.monotonic() - t0 < 30 and merges.reports == []
    assert merges.ask(frozenset({ray.get_runtime_context().get_node_id()}), str(tmp_path), 4)  # free for the next
    merges.wait(0.2)
