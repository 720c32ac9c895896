"""Checkpoints through the runner (issue 42): a run resumes from its newest checkpoint that passes its checks
(a damaged or planted one is skipped with a warning naming it), a preempted run is not stored and resumes
with the next command, a run of a larger budget grows a stored run's final state; what is stored is, bit
for bit, what the run uninterrupted stores, and attempts/ says where it started. In process here; on Ray
with a real SIGKILL of the actor below (ray, faults)."""

from __future__ import annotations

import hashlib
import os
import pickle
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from runner.execute.checkpointing import PREEMPT, begin_preemption, encode, preemptible
from runner.execute.options import ExecutionOptions
from runner.fs.root import Root, open_root
from runner.grid.identity import validate_params
from runner.grid.spec import load_grid
from runner.run.grid_run import RunReport, run_grid
from runner.run.growth import plan_growth
from runner.store import ResultStore
from runner.store.checkpoints import CHECKPOINTS_DIR, CheckpointSkipped, CheckpointStore
from tasks import Checkpoint, RunContext, get_task
from tasks.base import is_checkpointable
from tasks.registry import builtin_task_names

TASK = "least_squares"
BASE = {"d_in": 8, "d_out": 2, "m": 30, "lr": 0.02, "tol": 1e-300}
# what a run's own computation gives: its summary and curve (the rest of a row is where and when it ran)
OWN = ["status", "n_steps", "flops", "diverged_step", *get_task(TASK).summary_fields]
LOCAL = ExecutionOptions(executor="local", progress=False)
RAY_STEPS = 80_000  # seconds of a run on Ray: long enough to be killed in its middle on a loaded machine


def grid(n_iters: int, seeds: tuple[int, ...] = (0, 1), log_every: int = 1) -> dict[str, Any]:
    params = {**BASE, "n_iters": n_iters, "log_every": log_every}
    return {"name": f"ck{n_iters}", "blocks": [{"task": TASK, "params": params, "product": {"seed": list(seeds)}}]}


def run(spec: dict[str, Any], root: Path, **options: Any) -> RunReport:
    return run_grid(spec, root, LOCAL.with_(**options))


def stored(root: Path) -> tuple[dict[str, dict[str, Any]], dict[str, pa.Table]]:
    """Each run's own numbers and its curve, by run id."""
    store = ResultStore(root)
    runs = store.read_runs(TASK)
    rows = {r["run_id"]: {k: r[k] for k in OWN} for r in runs.select(["run_id", *OWN]).to_pylist()}
    curves = store.read_curves(TASK)
    by_run = {rid: curves.filter(pa.compute.equal(curves["run_id"], rid)).sort_by("step") for rid in rows}
    return rows, by_run


def assert_same_store(got: Path, want: Path) -> None:
    rows, curves = stored(got)
    rows_want, curves_want = stored(want)
    assert rows.keys() == rows_want.keys()
    for rid in rows:
        assert rows[rid] == rows_want[rid], rid  # floats compared exactly; NaN has none here (tol never met)
        assert curves[rid].equals(curves_want[rid]), rid


def attempts(root: Path) -> dict[str, tuple[int | None, str | None]]:
    table = ResultStore(root).read_attempts(TASK, ["resumed_from", "grown_from"])
    return {r["run_id"]: (r["resumed_from"], r["grown_from"]) for r in table.to_pylist()}


def cell_ids(spec: dict[str, Any]) -> list[str]:
    g = load_grid(spec)
    return [c.run_id for c in g.cells_at(range(len(g)))]


def checkpoints_of(root: Path) -> CheckpointStore:
    return CheckpointStore(Root(*open_root(root)))


def saved_steps(spec: dict[str, Any], seed: int, steps: set[int]) -> list[Checkpoint]:
    """The run's own checkpoints after `steps`, as its learner builds them."""
    task = get_task(TASK)
    params = validate_params(task, {**spec["blocks"][0]["params"], "seed": seed})
    out: list[Checkpoint] = []

    def keep(c: Checkpoint) -> None:
        if c.step in steps:
            out.append(c)

    task.run(params, RunContext(checkpointer=keep, checkpoint_every=0.0))
    return out


def test_every_runner_test_learner_declares_checkpoints() -> None:
    assert is_checkpointable(get_task(TASK))


def test_a_run_resumes_from_its_newest_sound_checkpoint_and_stores_the_run_alone(tmp_path: Path) -> None:
    spec = grid(300)
    run(spec, tmp_path / "alone", checkpoints=False)
    root = tmp_path / "resumed"
    first, _ = cell_ids(spec)
    store = checkpoints_of(root)
    good, damaged, planted = saved_steps(spec, 0, {100, 150, 200})
    for ckpt in (good, damaged, planted):
        store.save(TASK, first, ckpt.step, encode(ckpt))
    folder = root / CHECKPOINTS_DIR / TASK / "runs" / first
    names = sorted(p.name for p in folder.iterdir())
    assert [int(n[:12]) for n in names] == [150, 200]  # only the newest two are kept: put 100 back by hand
    data = encode(good)
    (folder / f"{100:012d}-{hashlib.sha256(data).hexdigest()}.ckpt").write_bytes(data)
    # 150: its bytes changed after its checksum was taken; 200: a pickle that would run code, checksum right
    (folder / names[0]).write_bytes((folder / names[0]).read_bytes()[:-7] + b"garbage")
    evil = pickle.dumps({"step": 200, "tensors": {}, "state": Exploit()})
    (folder / names[1]).unlink()
    evil_name = f"{200:012d}-{hashlib.sha256(evil).hexdigest()}.ckpt"
    (folder / evil_name).write_bytes(evil)
    with pytest.warns(CheckpointSkipped) as caught:
        report = run(spec, root)
    messages = [str(w.message) for w in caught if issubclass(w.category, CheckpointSkipped)]
    assert any(names[0] in m and "checksum" in m for m in messages), messages
    assert any(evil_name in m for m in messages), messages
    assert not os.environ.get("CONVGRID_EXPLOITED"), "loading a checkpoint executed code"
    assert attempts(root) == {first: (100, None), cell_ids(spec)[1]: (None, None)}
    assert (report.resumes.runs, report.resumes.steps) == (1, 100)
    assert_same_store(root, tmp_path / "alone")
    assert not folder.exists(), "a committed run's checkpoints are deleted"


class Exploit:
    """What a planted checkpoint would run on an unsafe load."""

    def __reduce__(self) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        return (exploited, ())


def exploited() -> None:
    os.environ["CONVGRID_EXPLOITED"] = "1"


def test_a_larger_budget_grows_the_stored_run_and_equals_the_run_from_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "grown"
    run(grid(200), tmp_path / "short")
    assert not (tmp_path / "short" / CHECKPOINTS_DIR).exists(), "runs of milliseconds keep no final state"
    monkeypatch.setenv("CONVGRID_KEEP_FINAL_S", "0")  # these do
    run(grid(200), root)
    short = cell_ids(grid(200))
    growth = plan_growth(ResultStore(root), load_grid(grid(600)).cells_at(range(2)))
    assert (growth.grown, growth.grown_steps) == (2, 400)
    report = run(grid(600), root)
    assert (report.resumes.runs, report.resumes.steps) == (2, 400)
    long_ids = cell_ids(grid(600))
    got = attempts(root)
    assert {rid: got[rid] for rid in long_ids} == {long_ids[0]: (200, short[0]), long_ids[1]: (200, short[1])}
    run(grid(600), tmp_path / "scratch", checkpoints=False)
    rows, curves = stored(root)
    rows_want, curves_want = stored(tmp_path / "scratch")
    for rid in long_ids:
        assert rows[rid] == rows_want[rid] and curves[rid].equals(curves_want[rid]), rid
    # a curve cadence that does not divide the shorter budget: its last row is not the longer run's
    run(grid(250, (3,), log_every=7), root)
    run(grid(600, (3,), log_every=7), root)
    run(grid(600, (3,), log_every=7), tmp_path / "scratch7", checkpoints=False)
    (rid,) = cell_ids(grid(600, (3,), log_every=7))
    assert attempts(root)[rid][0] == 250
    assert stored(root)[1][rid].equals(stored(tmp_path / "scratch7")[1][rid])


def test_a_preempted_run_is_not_stored_and_resumes_with_the_next_command(tmp_path: Path) -> None:
    spec = grid(30_000, (0,), log_every=500)
    root = tmp_path / "preempted"
    folder = root / CHECKPOINTS_DIR / TASK / "runs" / cell_ids(spec)[0]
    gave_up = threading.Event()
    reports: list[RunReport] = []
    worker = threading.Thread(target=lambda: reports.append(run(spec, root, checkpoint_every_s=0.02)))
    try:
        worker.start()
        deadline = time.monotonic() + 60
        while not (folder.exists() and any(folder.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.01)  # until the run has saved: it is then surely running
        assert begin_preemption(gave_up.set), "runs were executing: SIGTERM preempts them"
        worker.join(60)
        assert not worker.is_alive() and not gave_up.is_set(), "the preempted run stopped within its grace"
    finally:
        PREEMPT.clear()
    assert reports[0].counts.total() == 0 and not ResultStore(root).tasks(), "a preempted run is never stored"
    held = checkpoints_of(root).steps(TASK, cell_ids(spec)[0])
    assert held and 0 < max(held) < 30_000
    report = run(spec, root)
    assert report.resumes.runs == 1 and attempts(root)[cell_ids(spec)[0]][0] == max(held)
    run(spec, tmp_path / "alone", checkpoints=False)
    assert_same_store(root, tmp_path / "alone")


def test_sigterm_without_runs_in_flight_stops_at_once() -> None:
    assert not begin_preemption(lambda: None)
    assert not PREEMPT.is_set()


def test_a_sigterm_repeated_at_once_is_the_same_preemption_a_later_one_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """SLURM signals every process of a job: the driver gets SIGTERM from slurmd and again from the job's
    script. That repeat must not cut the runs' grace short (tests/test_slurm.py, `scontrol requeue`); a
    second SIGTERM later than REPEAT_S stops at once."""
    from runner.execute import checkpointing

    stopped = threading.Event()
    try:
        with preemptible(60.0):
            assert begin_preemption(stopped.set)
            assert begin_preemption(stopped.set), "the repeat within REPEAT_S is absorbed"
            monkeypatch.setattr(checkpointing, "REPEAT_S", 0.0)
            assert not begin_preemption(stopped.set), "a second SIGTERM later stops at once"
    finally:
        PREEMPT.clear()
    assert not stopped.is_set()


@pytest.fixture(scope="module")
def ray_alone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Ray tests' run stored uninterrupted, in process (once for both)."""
    root = tmp_path_factory.mktemp("alone")
    run(grid(RAY_STEPS, (0,), log_every=1000), root, checkpoints=False)
    return root


@pytest.mark.faults
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_on_ray_a_run_whose_worker_is_killed_or_preempted_resumes(
    tmp_path: Path, ray_local: Any, ray_alone: Path, signum: int
) -> None:
    """SIGKILL to the actor: the run resumes from its last checkpoint on the cadence. SIGTERM (a node
    drained): the worker saves the run at once (none on the cadence here: every 60 s), its driver hands it
    out again, and it resumes."""
    import ray

    from runner.execute.ray_pool import RayExecutor

    spec = grid(RAY_STEPS, (0,), log_every=1000)
    root = tmp_path / "killed"
    folder = root / CHECKPOINTS_DIR / TASK / "runs" / cell_ids(spec)[0]
    executor = RayExecutor(workers=1)
    executor.start()
    reports: list[RunReport] = []
    options = LOCAL.with_(checkpoint_every_s=0.02 if signum == signal.SIGKILL else 60.0)
    worker = threading.Thread(target=lambda: reports.append(run_grid(spec, root, options, executor=executor)))
    try:
        (pid,) = executor.worker_pids()
        worker.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until the run is going (its actor says so) and, to kill, has saved
            busy = ray.get(executor.actors[0].current.remote(), timeout=10)
            saved = signum == signal.SIGTERM or (folder.exists() and any(folder.iterdir()))
            if busy is not None and busy[1] > 0.5 and saved:
                break
            time.sleep(0.02)
        os.kill(pid, signum)
        worker.join(180)
        assert not worker.is_alive()
    finally:
        executor.close()
    resumed_from, _ = attempts(root)[cell_ids(spec)[0]]
    assert resumed_from is not None and 0 < resumed_from < RAY_STEPS, "the run's next attempt resumed"
    assert reports[0].counts == {"ok": 1} and reports[0].resumes.runs == 1 and not folder.exists()
    assert_same_store(root, ray_alone)


def _growable_example(name: str) -> tuple[dict[str, Any], str, int] | None:
    """A learner's first example whose budget grows, its budget param and the budget to grow to (at least 3,
    so that a third of it is a shorter run)."""
    task = get_task(name)
    for raw in task.examples:
        params = validate_params(task, raw)
        budget = task.growable_budget(params)
        if budget is not None:
            return dict(raw), budget, max(3, int(getattr(params, budget)))
    return None


GROWABLE = [n for n in sorted({*builtin_task_names()}) if _growable_example(n) is not None]


@pytest.mark.parametrize("name", GROWABLE)
def test_every_learner_s_budget_grows_through_the_runner(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the store, for each learner with a growable example: a run of a third of the budget keeps its
    final state, the full budget grows it (attempts say from which run) and stores what it stores from
    scratch. A learner's steps need not count its budget (hierarchical's count every epoch, its budget is the
    final phase's): final states are filed by the budget, not the step."""
    monkeypatch.setenv("CONVGRID_KEEP_FINAL_S", "0")
    found = _growable_example(name)
    assert found is not None
    raw, budget, full = found

    def spec(value: int) -> dict[str, Any]:
        return {"name": f"grow{value}", "blocks": [{"task": name, "params": {**raw, budget: value}}]}

    run(spec(full // 3), tmp_path / "grown")
    (short,) = cell_ids(spec(full // 3))
    run(spec(full), tmp_path / "grown")
    run(spec(full), tmp_path / "scratch", checkpoints=False)
    (rid,) = cell_ids(spec(full))
    table = ResultStore(tmp_path / "grown").read_attempts(name, ["run_id", "grown_from"]).to_pylist()
    assert {r["run_id"]: r["grown_from"] for r in table}[rid] == short, "the longer run grew the shorter one"
    own = ["status", "n_steps", "flops", "diverged_step", *get_task(name).summary_fields]

    def row(root: Path) -> dict[str, Any]:
        runs = ResultStore(root).read_runs(name).to_pylist()
        return {k: r[k] for r in runs if r["run_id"] == rid for k in own}

    def curve(root: Path) -> pa.Table:
        curves = ResultStore(root).read_curves(name)
        return curves.filter(pa.compute.equal(curves["run_id"], rid)).sort_by("step")

    grown, scratch = row(tmp_path / "grown"), row(tmp_path / "scratch")
    assert grown.keys() == scratch.keys()
    for key in grown:
        a, b = grown[key], scratch[key]
        assert a == b or (isinstance(a, float) and a != a and b != b), key
    pd.testing.assert_frame_equal(
        curve(tmp_path / "grown").to_pandas(), curve(tmp_path / "scratch").to_pandas(), check_exact=True
    )


def test_a_dropped_pool_is_not_kept_alive_by_its_preemption_listener() -> None:
    """A Ray pool listens for the driver's preemption to tell its actors. A pool its caller drops without
    closing must still be collected (and its actors with it, as Ray kills actors whose handles are gone):
    a strong reference here kept every dropped pool's actors holding their CPUs, and the next pool waited
    for a CPU for ever."""
    import gc
    import weakref

    from runner.execute.checkpointing import _listeners, on_preempt

    class Pool:
        def preempt(self) -> None: ...

    pool = Pool()
    on_preempt(pool.preempt)
    gone = weakref.ref(pool)
    del pool
    gc.collect()
    assert gone() is None, "the preemption listener kept a dropped pool alive"
    assert _listeners[-1]() is None, "its listener is dead, and skipped by a preemption"


def _long_config(name: str, seconds: float = 3.0) -> dict[str, Any]:
    """A learner's first growable example with its budget scaled so that a run takes about `seconds` here
    (least_squares': this module's own config, whose tolerance is never met, as its examples' soon is)."""
    if name == TASK:
        return {**BASE, "n_iters": RAY_STEPS, "log_every": 1000}
    found = _growable_example(name)
    assert found is not None
    raw, budget, _ = found
    task = get_task(name)
    params = validate_params(task, raw)
    base = int(getattr(params, budget))
    t0 = time.perf_counter()
    task.run(validate_params(task, {**raw, budget: 4 * base}), RunContext())
    per_unit = max((time.perf_counter() - t0) / (4 * base), 1e-6)
    return {**raw, budget: max(4 * base, int(seconds / per_unit))}


@pytest.mark.soak
@pytest.mark.faults
@pytest.mark.parametrize("name", GROWABLE)
def test_every_learner_on_ray_sigkilled_mid_run_resumes_to_the_run_alone(
    name: str, tmp_path: Path, ray_local: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42's conformance on Ray, per learner: a run of a few seconds whose actor is SIGKILLed once it has
    saved resumes on its next attempt from that checkpoint, and stores bit for bit the run alone in process."""
    import ray

    from runner.execute.ray_pool import RayExecutor

    raw = _long_config(name)
    spec = {"name": f"long_{name}", "blocks": [{"task": name, "params": raw}]}
    (rid,) = cell_ids(spec)
    run(spec, tmp_path / "alone", checkpoints=False)
    root = tmp_path / "killed"
    folder = root / CHECKPOINTS_DIR / name / "runs" / rid
    executor = RayExecutor(workers=1)
    executor.start()
    reports: list[RunReport] = []
    worker = threading.Thread(
        target=lambda: reports.append(run_grid(spec, root, LOCAL.with_(checkpoint_every_s=0.05), executor=executor))
    )
    try:
        (pid,) = executor.worker_pids()
        worker.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the run going (its actor says so) and saved past its step 0
            busy = ray.get(executor.actors[0].current.remote(), timeout=10)
            steps = [int(f.name[:12]) for f in folder.iterdir()] if folder.exists() else []
            if busy is not None and max(steps, default=0) > 0:
                break
            assert not reports, "the run ended before it could be killed: make it longer"
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)
        worker.join(300)
        assert not worker.is_alive()
    finally:
        executor.close()
    table = ResultStore(root).read_attempts(name, ["run_id", "resumed_from"]).to_pylist()
    resumed = [r["resumed_from"] for r in table if r["run_id"] == rid]
    assert resumed and resumed[-1] is not None and resumed[-1] > 0, "the next attempt resumed"
    own = ["status", "n_steps", "flops", "diverged_step", *get_task(name).summary_fields]

    def stored_run(where: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
        store = ResultStore(where)
        runs = store.read_runs(name).to_pandas()
        curves = store.read_curves(name).to_pandas()
        return runs.loc[runs["run_id"] == rid, own].reset_index(drop=True), curves.loc[
            curves["run_id"] == rid
        ].sort_values("step").reset_index(drop=True)

    (rows, curve), (rows_alone, curve_alone) = stored_run(root), stored_run(tmp_path / "alone")
    pd.testing.assert_frame_equal(rows, rows_alone, check_exact=True)
    pd.testing.assert_frame_equal(curve, curve_alone, check_exact=True)
