"""What checkpoints cost and save (issue 42), on least_squares, whose cost is linear in its budget, through the
worker's own path (runner.execute.worker.run_item: the store's lookups, saves with checksums, loads).

    python benchmarks/checkpoint.py [--repeats 3] [--d-in 192] [--short 5000] [--long 50000]

- overhead: a run of `--long` steps with checkpoints at the default cadence (every DEFAULT_EVERY_S seconds,
  stretched to keep saving under 1 %) against the same run with none; contenders interleaved, `--repeats`
  rounds, the fastest of each compared. A run's time is its CPU time plus the wall time it spent inside
  the checkpoint store (look-ups, saves, their fsyncs): on a machine shared with other jobs, wall times
  of the same run vary by 3x, CPU times by a few %; counting the store's wall time on top (its CPU part
  twice) keeps every wait of a save in, and overstates the overhead a little rather than understate it.
- work lost per kill: the run is "SIGKILLed" at a random time (it stops at its next step and its state is
  lost: only what it saved before survives), then runs again from its newest checkpoint; the work lost is
  the time of the two attempts less the run's time alone, averaged over `--repeats` kills.
- grow: the `--long` run started from the stored final state of the `--short` run of the same config (what
  `convgrid run` does for a grid grown from 5,000 to 50,000 steps), against the `--long` run from scratch.
  A learner whose cost is linear in its budget cannot do better than (long - short) / long (0.9 for
  5k -> 50k): the ratio says how close growth comes to computing only the new steps.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one thread, as a worker
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.machine import header  # noqa: E402
from runner.execute.base import CheckpointTarget, WorkItem  # noqa: E402
from runner.execute.checkpointing import DEFAULT_EVERY_S, run_context  # noqa: E402
from runner.execute.worker import run_item, set_torch_threads  # noqa: E402
from runner.grid.identity import run_id, validate_params  # noqa: E402
from runner.store.checkpoints import CheckpointStore  # noqa: E402
from tasks import Checkpoint, get_task  # noqa: E402

TASK = "least_squares"
SPENT: dict[str, float] = {"s": 0.0}  # seconds inside the checkpoint store (saves and look-ups), all runs


def accounted(method: Callable[..., Any]) -> Callable[..., Any]:
    def timed_method(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            SPENT["s"] += time.perf_counter() - t0

    return timed_method


for _name in ("save", "save_final", "latest", "grow_source"):  # what a run spends on its checkpoints, directly
    setattr(CheckpointStore, _name, accounted(getattr(CheckpointStore, _name)))


def item(d_in: int, n_iters: int, root: str | None) -> WorkItem:
    task = get_task(TASK)
    raw = {"d_in": d_in, "d_out": d_in // 4, "m": 2 * d_in, "lr": 0.002, "tol": 1e-300, "n_iters": n_iters}
    raw["log_every"] = 50
    params = validate_params(task, raw)
    target = CheckpointTarget(root, keep_final_s=0.0) if root is not None else None
    return WorkItem(run_id(task, params), TASK, params.model_dump(mode="json"), target)


def timed(work: WorkItem) -> tuple[float, dict[str, Any]]:
    """The run's seconds (its CPU time, plus its wall time inside the checkpoint store) and its row."""
    SPENT["s"] = 0.0
    t0 = time.process_time()
    record = run_item(work)
    assert record.status == "ok", record.row.get("error")
    return time.process_time() - t0 + SPENT["s"], record.row


def killed_at(work: WorkItem, kill_s: float) -> float:
    """Run `work` until `kill_s` seconds, losing all it did not save (a SIGKILL); then run it again from its
    newest checkpoint. Returns the two attempts' seconds."""
    task = get_task(TASK)
    params = validate_params(task, work.params)
    kill = threading.Event()
    SPENT["s"] = 0.0
    t0 = time.process_time()
    ctx, _ = run_context(work, task, params)
    save = ctx.checkpointer
    assert save is not None

    def until_killed(c: Checkpoint) -> None:
        if not kill.is_set():  # a SIGKILL leaves no time to save
            save(c)

    ctx.checkpointer, ctx.preempt = until_killed, kill  # the kill stops the run at its next step, unsaved

    def killer() -> None:  # the kill comes after `kill_s` seconds of the run's CPU time
        while time.process_time() - t0 < kill_s:
            time.sleep(0.02)
        kill.set()

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    task.run(params, ctx)
    thread.join()
    first = time.process_time() - t0 + SPENT["s"]
    again, row = timed(work)
    assert row["resumed_from"] or first < DEFAULT_EVERY_S, "a run killed after a save resumes from it"
    return first + again


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--d-in", type=int, default=192)
    parser.add_argument("--short", type=int, default=5000)
    parser.add_argument("--long", type=int, default=50000)
    args = parser.parse_args()
    set_torch_threads(1)
    print(header())
    rng = random.Random(42)
    scratch_dir = Path(tempfile.mkdtemp(prefix="convgrid-ckpt-bench-"))
    try:
        # the short run's final state, stored once; each grow starts from a copy holding only it
        seeded = scratch_dir / "seeded"
        timed(item(args.d_in, args.short, str(seeded)))
        plain, saving, scratch, grown, in_store = [], [], [], [], []
        for r in range(args.repeats):
            plain.append(timed(item(args.d_in, args.long, None))[0])
            saving.append(timed(item(args.d_in, args.long, str(scratch_dir / f"saving{r}")))[0])
            in_store.append(SPENT["s"] / saving[-1])
            scratch.append(timed(item(args.d_in, args.long, None))[0])
            root = scratch_dir / f"grow{r}"
            shutil.copytree(seeded, root)
            t, row = timed(item(args.d_in, args.long, str(root)))
            assert row["resumed_from"] == args.short and row["grown_from"], row
            grown.append(t)
            print(
                f"round {r}: plain {plain[-1]:.2f} s, with checkpoints {saving[-1]:.2f} s, "
                f"from scratch {scratch[-1]:.2f} s, grown {grown[-1]:.2f} s"
            )
        alone = min(plain)
        overhead = (min(saving) / alone - 1) * 100
        print(
            f"with checkpoints, time inside the checkpoint store (look-ups, saves): "
            f"{100 * statistics.median(in_store):.3f}% of the run (median of {len(in_store)})"
        )
        lost = []
        for r in range(args.repeats):
            kill_s = rng.uniform(0.1, alone * 0.95)
            total = killed_at(item(args.d_in, args.long, str(scratch_dir / f"kill{r}")), kill_s)
            lost.append(total - alone)
            print(f"kill {r} at {kill_s:.1f} s: two attempts {total:.2f} s, {lost[-1]:.2f} s more than alone")
        ratio = min(grown) / min(scratch)
        floor = (args.long - args.short) / args.long
        print(f"a run alone: {alone:.2f} s ({args.long} steps); grow's floor (new steps only): {floor:.3f}")
        print(
            f"checkpoint: overhead {overhead:.2f}% at the default cadence; work lost per kill "
            f"{statistics.mean(lost):.2f} s (cadence {DEFAULT_EVERY_S:g} s); grow {args.short // 1000}k->"
            f"{args.long // 1000}k steps T_grow/T_scratch {ratio:.3f}"
        )
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
