"""The fault test of issue 42 (soak: minutes long, `make faults`, not CI): a grid of runs of about 30 s each
on a three-node `ray.cluster_utils.Cluster`, its workers SIGKILLed again and again and one node preempted
(SIGTERM to its worker processes, as a drained node or a reclaimed spot instance gets, then the node
removed). With checkpoints every 2 s the CPU-seconds the workers spend in all stay within 1.2x of the
uninterrupted grid's (without checkpoints every kill restarts its run from step 0), no run is lost, none
is stored twice, and every stored result equals the uninterrupted one bit for bit.

    pytest -m soak tests/test_checkpoint_soak.py -s      # prints the measured numbers
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from runner.execute.options import ExecutionOptions
from runner.execute.ray_pool import RayExecutor
from runner.run.grid_run import run_grid
from tests.test_checkpoint_runs import BASE, TASK, assert_same_store, attempts
from tests.test_cluster_faults import three_nodes  # noqa: F401 - a fixture, found by its name here

pytestmark = [pytest.mark.soak, pytest.mark.ray, pytest.mark.faults]
RUN_S = 30.0  # CPU seconds of a run (on a loaded machine its wall time is longer)
RUNS = 6
CADENCE_S = 2.0
KILLS = 5  # SIGKILLs and SIGTERMs in all, 15-25 s apart (each kill also restarts a worker process: imports)


def steps_for(seconds: float) -> int:
    """least_squares steps of the soak's size that take about `seconds` of CPU time here."""
    from runner.grid.identity import validate_params
    from tasks import RunContext, get_task

    task = get_task(TASK)
    params = validate_params(task, {**BASE, "d_in": 96, "d_out": 24, "m": 192, "n_iters": 4000, "log_every": 100})
    t0 = time.process_time()
    task.run(params, RunContext())
    return int(4000 * seconds / (time.process_time() - t0))


def cpu_s(pid: int) -> float:
    fields = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """The CPU-seconds of every worker process the executor had, read every half second (a killed
    process keeps its last reading: at most half a second of it is missed)."""

    def __init__(self, executor: RayExecutor) -> None:
        self.executor = executor
        self.last: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        import ray

        while not self.stop.wait(0.5):
            try:
                pids = ray.get([a.pid.remote() for a in self.executor.actors], timeout=2)
            except Exception:  # noqa: BLE001 - an actor restarting: read the others next time
                pids = list(self.last)
            for pid in pids:
                with contextlib.suppress(OSError, IndexError):
                    self.last[pid] = cpu_s(pid)

    def total(self) -> float:
        self.stop.set()
        self.thread.join()
        return sum(self.last.values())


def spec(n_iters: int) -> dict[str, Any]:
    params = {**BASE, "d_in": 96, "d_out": 24, "m": 192, "n_iters": n_iters, "log_every": 100}
    return {"name": "soak", "blocks": [{"task": TASK, "params": params, "product": {"seed": list(range(RUNS))}}]}


@pytest.mark.timeout(2400)
def test_kills_and_a_preempted_node_cost_within_1_2x_and_lose_nothing(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import ray

    cluster = request.getfixturevalue("three_nodes")  # test_cluster_faults' cluster of three nodes
    grid = spec(steps_for(RUN_S))
    options = ExecutionOptions(progress=False, checkpoint_every_s=CADENCE_S, preempt_grace_s=10.0)
    calm = RayExecutor(address=cluster.address, workers=3)
    calm.start()
    meter = CpuMeter(calm)
    t0 = time.monotonic()
    run_grid(grid, tmp_path / "calm", options, executor=calm)
    calm_wall, calm_cpu = time.monotonic() - t0, meter.total()
    calm.close()

    rough = RayExecutor(address=cluster.address, workers=3)
    rough.start()
    meter = CpuMeter(rough)
    done = threading.Event()
    kills: list[str] = []

    def havoc() -> None:
        rng = random.Random(7)
        preempted = False
        while not done.wait(rng.uniform(15.0, 25.0)) and len(kills) < KILLS:
            if not preempted and len(kills) >= 2:  # a node preempted: SIGTERM to its workers, then it goes
                mine = ray.get_runtime_context().get_node_id()  # the driver's node stays
                victim = next(n for n in cluster.worker_nodes if n.node_id != mine)
                where = ray.get([a.placement.remote() for a in rough.actors], timeout=10)
                pids = ray.get([a.pid.remote() for a in rough.actors], timeout=10)
                for (node, _), pid in zip(where, pids, strict=True):
                    if node == victim.node_id:
                        os.kill(pid, signal.SIGTERM)
                        kills.append(f"SIGTERM {pid}")
                time.sleep(options.preempt_grace_s)
                cluster.remove_node(victim)
                preempted = True
                continue
            try:  # an actor well into a run: one that has saved (killing an idle one proves nothing)
                states = ray.get([a.current.remote() for a in rough.actors], timeout=10)
                pids = ray.get([a.pid.remote() for a in rough.actors], timeout=10)
                busy = [pid for pid, st in zip(pids, states, strict=True) if st is not None and st[1] > 3 * CADENCE_S]
                if busy:
                    pid = rng.choice(busy)
                    os.kill(pid, signal.SIGKILL)
                    kills.append(f"SIGKILL {pid}")
            except Exception:  # noqa: BLE001 - an actor between lives: the next round kills another
                continue

    killer = threading.Thread(target=havoc, daemon=True)
    t0 = time.monotonic()
    killer.start()
    try:
        report = run_grid(grid, tmp_path / "rough", options, executor=rough)
    finally:
        done.set()
        killer.join()
    rough_wall, rough_cpu = time.monotonic() - t0, meter.total()
    rough.close()
    cluster.add_node(num_cpus=1)  # as it was, for whoever comes next
    ratio = rough_cpu / calm_cpu
    print(
        f"\nsoak: {RUNS} runs of ~{RUN_S:g} s on 3 workers; calm {calm_wall:.0f} s wall, {calm_cpu:.0f} CPU-s; "
        f"with {len(kills)} kills ({', '.join(kills)}) {rough_wall:.0f} s wall, {rough_cpu:.0f} CPU-s: "
        f"{ratio:.2f}x; resumed {report.resumes.runs} runs, saving {report.resumes.steps:,} steps"
    )
    rows = ds.dataset(tmp_path / "rough" / "runs", partitioning="hive").to_table(columns=["run_id"])
    assert rows.num_rows == RUNS == len(set(rows["run_id"].to_pylist())), "nothing lost, nothing stored twice"
    assert any(step for step, _ in attempts(tmp_path / "rough").values()), "killed runs resumed"
    assert_same_store(tmp_path / "rough", tmp_path / "calm")
    assert ratio <= 1.2
