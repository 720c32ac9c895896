"""Multi-node faults on a three-node Ray cluster on this machine (ray.cluster_utils.Cluster,
loopback): a worker node removed mid-grid and mid-study. The grid completes with every run stored
exactly once; the study finishes its trials.

The removal is triggered by a condition (the first part file in the store), never by a delay, so
some work is stored and the rest is in flight on every node when the node goes.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from runner import RayExecutor, ResultStore, run_grid
from runner.store.trials import read_trials
from runner.tune.driver import tune
from tests.faulty_inputs import faulty_study
from tests.options import opts

pytestmark = [pytest.mark.ray, pytest.mark.faults]


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[Any]:
    from ray.cluster_utils import Cluster

    from cluster import connect

    # The GCS calls a node dead after health_check_failure_threshold missed checks, one per period: 5 x 3 s by
    # default, during which an actor placed on the lost node waits (the idle-actor test spent 30 s of its 34 so).
    # A lost node is detected the same way, only sooner: 5 checks 1 s apart. A live raylet would have to leave
    # five checks in a row unanswered for 2 s each to be called dead, which a loaded machine does not do.
    detect = {"health_check_period_ms": 1000, "health_check_timeout_ms": 2000, "health_check_failure_threshold": 5}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "_system_config": detect})
    for _ in range(2):
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray = connect(cluster.address)
    yield cluster
    ray.shutdown()  # this process only joined: disconnect, then stop the nodes the fixture started
    cluster.shutdown()


def _alive_workers(cluster: Any) -> list[Any]:
    return list(cluster.worker_nodes)  # remove_node drops a node from this set


def _victim(cluster: Any) -> Any:
    """A worker node other than the one this driver is attached to (all share 127.0.0.1)."""
    import ray

    mine = ray.get_runtime_context().get_node_id()
    return next(n for n in _alive_workers(cluster) if n.node_id != mine)


def _descendants(pid: int) -> list[tuple[int, str]]:
    """Every process under `pid` (from /proc), each with its start time so that a reused pid is not hit."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue  # self, thread-self, and the kernel's files
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError, ValueError):
            continue  # not a process, or gone
        parents.setdefault(int(fields[1]), []).append((int(entry.name), fields[19]))
    found: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def _lose(cluster: Any, node: Any) -> None:
    """The node goes as a machine goes: its raylet is SIGKILLed (remove_node) and so are the worker
    processes it started. remove_node alone leaves them running until they notice their raylet is gone,
    and meanwhile an orphaned actor still answers and finishes chunks, as no lost machine would."""
    workers = _descendants(_raylet_pid(node))
    cluster.remove_node(node, allow_graceful=False)
    for pid, started in workers:
        try:
            if (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[19] == started:
                os.kill(pid, signal.SIGKILL)
        except (OSError, IndexError):
            pass  # exited already with its raylet


def _ensure_three(cluster: Any) -> None:
    while len(_alive_workers(cluster)) < 2:
        cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()


def _raylet_pid(node: Any) -> int:
    (raylet,) = node.all_processes["raylet"]  # a cluster_utils node's processes, by Ray's process type
    return int(raylet.process.pid)


def _busy_node(cluster: Any, executor: RayExecutor) -> Any | None:
    """A worker node (not the driver's) whose actor is running a chunk right now, if there is one."""
    import ray

    pids = ray.get([actor.pid.remote() for actor in executor.actors], timeout=10)  # answered while busy
    mine = ray.get_runtime_context().get_node_id()
    for node in _alive_workers(cluster):
        if node.node_id == mine:
            continue
        on_node = {pid for pid, _ in _descendants(_raylet_pid(node))}
        for actor, pid in zip(executor.actors, pids, strict=True):
            if pid in on_node and ray.get(actor.current.remote(), timeout=10) is not None:
                return node
    return None


def _remove_node_once_stored(
    cluster: Any, executor: RayExecutor, root: Path, done: threading.Event
) -> threading.Thread:
    """A thread that, once a runs part file exists under root, removes a worker node whose actor is in
    the middle of a chunk (so that the chunk is lost with it, whatever the chunk sizes and timing)."""

    def remove() -> None:
        while not list((root / "runs").rglob("part-*.parquet")):
            if done.is_set():
                return
            time.sleep(0.05)
        from ray.exceptions import RayError

        while not done.is_set():
            try:
                node = _busy_node(cluster, executor)
            except RayError:  # an actor restarting, a probe past its timeout: look again
                node = None
            if node is not None:
                _lose(cluster, node)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=remove, daemon=True)
    thread.start()
    return thread


@contextmanager
def losing_a_busy_node(cluster: Any, executor: RayExecutor, root: Path) -> Iterator[None]:
    """While the body runs, a worker node whose actor is mid-chunk is lost once a runs part exists under
    root (`_remove_node_once_stored`); the remover is stopped and joined when the body ends."""
    done = threading.Event()
    remover = _remove_node_once_stored(cluster, executor, root, done)
    try:
        yield
    finally:
        done.set()
        remover.join()


def _physical_ids(root: Path) -> list[str]:
    return ds.dataset(root / "runs", partitioning="hive").to_table(columns=["run_id"])["run_id"].to_pylist()


def test_worker_node_removed_mid_grid_every_run_stored_once(tmp_path: Path, three_nodes: Any) -> None:
    _ensure_three(three_nodes)
    n = 45
    grid = {
        "name": "node_lost",
        "blocks": [{"task": "faulty", "params": {"sleep_s": 0.2}, "product": {"x": [float(i) for i in range(n)]}}],
    }
    executor = RayExecutor(address=three_nodes.address, workers=3)
    with losing_a_busy_node(three_nodes, executor, tmp_path):
        report = run_grid(grid, tmp_path, opts(flush_s=0.5), executor=executor)
    assert len(_alive_workers(three_nodes)) == 1  # the node really went while the grid ran
    assert report.counts == {"ok": n}
    ids = _physical_ids(tmp_path)
    assert len(ids) == len(set(ids)) == n
    assert executor.chunks_resubmitted >= 1  # the lost node's chunk ran again elsewhere


def test_a_node_lost_while_its_actor_is_idle_gets_it_no_work(three_nodes: Any) -> None:
    """A node that dies between two `execute` calls (claim waves, studies): nothing waits on its actor,
    so only the pool's check at the next call notices; before it, the next chunk sent there waited for a
    restart that never came (no CPU slot left) and the call hung."""
    from runner.execute.base import WorkItem

    _ensure_three(three_nodes)
    executor = RayExecutor(address=three_nodes.address, workers=3)

    def items(n: int, offset: int) -> list[WorkItem]:
        return [WorkItem(f"r{offset + i:04d}", "faulty", {"x": float(offset + i), "seed": 0}) for i in range(n)]

    try:
        assert sum(len(r) for r in executor.execute(items(3, 0))) == 3  # every actor has run and is idle
        _lose(three_nodes, _victim(three_nodes))
        records = [r for batch in executor.execute(items(9, 100)) for r in batch]
        assert sorted(r.row["x"] for r in records) == [float(100 + i) for i in range(9)]
        assert executor.down  # the lost node's actor was noticed before it was given work
    finally:
        executor.close()


def test_worker_node_removed_mid_study_the_study_completes(tmp_path: Path, three_nodes: Any) -> None:
    _ensure_three(three_nodes)
    study = faulty_study("node_lost_study", 24, 3, sleep_s=0.3, sampler={"name": "random", "seed": 3})
    executor = RayExecutor(address=three_nodes.address, workers=3)
    try:
        with losing_a_busy_node(three_nodes, executor, tmp_path):
            # runs flushed every 0.3 s (the default 2 s could store the first part as the study ends, with
            # no trial left in flight to lose)
            (report,) = tune(study, tmp_path, opts(flush_s=0.3), executor=executor)
    finally:
        executor.close()
    assert len(_alive_workers(three_nodes)) == 1
    assert report.states == {"COMPLETE": 24}
    trials = read_trials(ResultStore(tmp_path), "node_lost_study").to_pylist()
    assert [t["state"] for t in trials] == ["COMPLETE"] * 24
    ids = _physical_ids(tmp_path)
    assert len(ids) == len(set(ids))  # a trial's run lost with the node ran again, and was stored once
