"""The embedded Ray executor: same stores as in-process, chunking, completion order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from runner import RayExecutor, ResultStore, run_grid
from runner.execute.base import WorkItem
from tests.conftest import convgrid, done_ids
from tests.options import opts

pytestmark = pytest.mark.ray

GRID = {
    "name": "eq",
    "blocks": [
        {
            "task": "least_squares",
            "params": {"d_in": 8, "m": 30, "n_iters": 60, "cond": 20.0},
            "product": {"lr": [0.01, 0.05, 0.1, 9.0]},
            "repeat": 3,
        },
        {"task": "least_squares", "params": {"lr_rule": "optimal", "n_iters": 40}, "repeat": 2},
    ],
}
# where and when a run ran, and in which of its store's commits (commit_seq: flushes split by timing)
PROVENANCE = ["batch_id", "wall_s", "started", "finished", "host", "device", "commit_seq"]


def _store_frames(root: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    store = ResultStore(root)
    runs = store.read_runs("least_squares").to_pandas().drop(columns=PROVENANCE)
    curves = store.read_curves("least_squares").to_pandas()
    return runs.sort_values("run_id").reset_index(drop=True), curves.reset_index(drop=True)


def test_ray_and_local_executors_give_identical_stores(tmp_path: Path, ray_local: object) -> None:
    local = run_grid(GRID, tmp_path / "local", opts())
    remote = run_grid(GRID, tmp_path / "ray", opts(), executor=RayExecutor(workers=2))
    assert local.executed == remote.executed == 14
    assert local.counts == remote.counts and remote.counts["diverged"] == 3
    runs_l, curves_l = _store_frames(tmp_path / "local")
    runs_r, curves_r = _store_frames(tmp_path / "ray")
    pd.testing.assert_frame_equal(runs_l, runs_r, check_exact=True)
    pd.testing.assert_frame_equal(curves_l, curves_r, check_exact=True)
    assert (ResultStore(tmp_path / "ray").read_runs("least_squares")["host"].to_pylist()[0]) is not None


def test_cells_run_in_process_while_ray_starts_and_on_ray_after_are_each_stored_once(
    tmp_path: Path, ray_local: object
) -> None:
    from tests.test_warm_start import stored_ids, warm_executor

    # the first 5 cells are pulled before Ray is "up" (a stand-in start): they run here; the other 9 on the
    # actors of the module's Ray
    executor, starts = warm_executor(after=6, pool=RayExecutor(workers=1))
    report = run_grid(GRID, tmp_path / "warm", opts(), executor=executor)
    assert (report.executed, executor.ran_locally, starts[0].warmed) == (14, 5, True)
    executor.close()  # the caller's executor: the grid leaves it open
    assert executor.pool.chunks_submitted > 0 and executor.pool.actors == []
    ids = stored_ids(tmp_path / "warm", "least_squares")
    assert len(ids) == len(set(ids)) == 14
    run_grid(GRID, tmp_path / "local", opts())
    for warm, local in zip(_store_frames(tmp_path / "warm"), _store_frames(tmp_path / "local"), strict=True):
        pd.testing.assert_frame_equal(warm, local, check_exact=True)


def test_chunks_grow_once_run_times_are_known(ray_local: object) -> None:
    from runner.grid.spec import load_grid

    grid = load_grid(
        {"blocks": [{"task": "least_squares", "params": {"d_in": 4, "m": 10, "n_iters": 5}, "repeat": 400}]}
    )
    items = [WorkItem(c.run_id, c.task, c.params_json()) for c in grid.cells]
    executor = RayExecutor(workers=2, target_chunk_s=0.5)
    try:
        seen = [r.run_id for chunk in executor.execute(items) for r in chunk]
    finally:
        executor.close()
    assert sorted(seen) == sorted(i.run_id for i in items)
    # 400 runs of well under a millisecond: far fewer Ray calls than runs
    assert executor.chunks_submitted < 40


def test_cli_driver_joins_an_existing_cluster_by_address(tmp_path: Path, ray_local) -> None:
    import yaml

    address = ray_local.get_runtime_context().gcs_address
    grid = tmp_path / "g.yaml"
    grid.write_text(
        yaml.safe_dump({"name": "joined", "blocks": [{"task": "least_squares", "product": {"lr": [0.01, 0.02, 0.03]}}]})
    )
    proc = convgrid("run", str(grid), "--results", str(tmp_path / "r"), "--address", address, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    assert "ran 3 of 3 cells" in proc.stdout
    assert ray_local.is_initialized()  # the driver left the shared cluster running
    assert len(done_ids(ResultStore(tmp_path / "r"))) == 3


@pytest.fixture(scope="module")
def pool(ray_local: object) -> Iterator[RayExecutor]:
    """One warm pool for the feed tests (starting actors costs seconds each time)."""
    executor = RayExecutor(workers=2, target_chunk_s=0.05)
    executor.worker_pids()
    yield executor
    executor.close()


class CountingSource:
    """A million least-squares cells made on demand; counts how many the executor pulled."""

    def __init__(self, n: int = 1_000_000) -> None:
        self.n = n
        self.pulled = 0

    def __iter__(self) -> Iterator[WorkItem]:
        for i in range(self.n):
            self.pulled += 1
            yield WorkItem(f"cell{i}", "least_squares", {"d_in": 4, "m": 10, "n_iters": 5, "seed": i})


def test_a_million_cell_source_is_pulled_only_as_workers_free_up(pool: RayExecutor) -> None:
    source = CountingSource()
    got: list[str] = []
    for records in pool.execute(source):
        got += [r.run_id for r in records]
        if len(got) >= 300:
            break
    assert len(got) == len(set(got)) and all(r.startswith("cell") for r in got)
    # at most one chunk per chunk slot (2 actors x 2) beyond what came back, never the whole source
    assert len(got) <= source.pulled <= len(got) + 4 * 1024


def test_a_waiting_source_is_asked_again_as_runs_finish(pool: RayExecutor) -> None:
    seen: list[str] = []
    answers: list[str] = []  # what the source answered each time it was asked: an item id or "wait"

    def source() -> Iterator[WorkItem | None]:
        sent = 0
        while sent < 6:
            if sent - len(seen) < 2:  # two in flight, like a tuner with parallel 2
                answers.append(f"t{sent}")
                yield WorkItem(f"t{sent}", "least_squares", {"d_in": 4, "m": 10, "n_iters": 5, "seed": sent})
                sent += 1
            else:
                answers.append("wait")
                yield None

    before = pool.chunks_submitted
    for records in pool.execute(source()):
        seen.extend(r.run_id for r in records)
    assert sorted(seen) == [f"t{i}" for i in range(6)]
    assert answers[:3] == ["t0", "t1", "wait"]  # asked at once for a third while two ran: it waited
    assert pool.chunks_submitted - before == 6  # two pending items go to two actors, not as one chunk to one


def test_a_source_waiting_with_nothing_in_flight_is_an_error(pool: RayExecutor) -> None:
    from runner.execute.base import FeedStalled
    from runner.execute.local import LocalExecutor

    for executor in (LocalExecutor(), pool):
        with pytest.raises(FeedStalled):
            list(executor.execute(iter([None])))


def test_the_local_executor_pulls_one_item_per_finished_run() -> None:
    from runner.execute.local import LocalExecutor

    source = CountingSource()
    got = 0
    for records in LocalExecutor(batch=False, workers=1).execute(source):
        got += len(records)
        assert source.pulled == got  # the next cell is made only once this one has been handed back
        if got == 20:
            break
    # with runs in threads, one cell per free thread: never more than the threads ahead
    source = CountingSource()
    got = 0
    for records in LocalExecutor(batch=False, workers=3).execute(source):
        got += len(records)
        assert got <= source.pulled <= got + 3
        if got >= 20:
            break
    # batched, cells of one key are pulled until a batch is full: never more than a batch ahead
    source = CountingSource()
    got = 0
    for records in LocalExecutor(max_batch=8, workers=1).execute(source):
        got += len(records)
        assert got <= source.pulled <= got + 8
        if got == 20:
            break
    assert source.pulled == 24  # three batches of 8 pulled, the third partly handed back


def test_a_group_from_the_source_travels_in_one_chunk(pool: RayExecutor) -> None:
    group = [WorkItem(f"g{i}", "least_squares", {"d_in": 4, "m": 10, "n_iters": 5, "seed": i}) for i in range(6)]
    before = pool.chunks_submitted
    seen = [r.run_id for records in pool.execute([group[0], group[1:]]) for r in records]
    assert sorted(seen) == sorted(i.run_id for i in group)
    # chunks of one while run times are unknown, but the group of five is never split
    assert pool.chunks_submitted - before == 2


def test_embedded_workers_run_at_the_drivers_priority(ray_local: object) -> None:
    """Ray's default worker niceness (15) would leave the runs the CPU last on a busy machine."""
    import os

    import ray

    @ray.remote(num_cpus=0)  # the module's warm pool holds both CPU slots
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote()) == os.nice(0)
