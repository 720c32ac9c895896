"""Where the time of a batched deep_linear run goes (issue 30): 64 same-shape configs of the
benchmarks/vectorized.py case (GD and BCGD, depth 10, `--width`, default 16) through `run_grid` with the
in-process executor (one worker, one thread, Parquet writes included), each phase timed by a wrapper.

    python benchmarks/batch_profile.py [--width 16] [--repeats 3] [--configs 64] [--clock wall|cpu]

Printed per case, in ms per member (the fastest of `--repeats` batched grids; phases from that grid),
inclusive, as a tree:
  grid              run_grid from call to return: planning, executing, writing, members
    executor        the worker's chunks (what is left of the grid: planning, store writes, members)
      keying        batch keys (params validated per item, batch_key)
      batch         the worker's batched call and its records
        run_batch   the task's batched call
          setup     per member: data, optimum, initial weights, theory (tracker.prepare)
          learner   the learner's steps (generator sends), of which
            products  the matrix products (FlopCounter.mm), the rest elementwise updates and Python
          errors    each step's errors of every member (the L2 metric)
          books     early stop, divergence, curves, reports (BatchTracker / per-member Trackers), results
        records     one RunRecord per member (row, provenance)
and the same grid one at a time (`batch=False`) as the reference: its ms per run and the speed-up.
The wrappers cost a few microseconds per call (the products' about 7,000 per GD batch), which the
phases include. `BENCH_TREE=DIR` profiles another source tree's runner.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, os.environ.get("BENCH_TREE") or str(REPO))

from benchmarks.machine import header  # noqa: E402 - after the path
from benchmarks.vectorized import ONE, QUIET, cases, grid_of  # noqa: E402

SPENT: defaultdict[str, float] = defaultdict(float)
# the clock of every phase: wall seconds, or (--clock cpu) the CPU seconds of the thread that runs the
# batch (the grid's own: of the whole process, the store's writer thread included), steadier when shared
CLOCK: list[Callable[[], float]] = [time.perf_counter]
TREE = [
    ("grid", 0),
    ("executor", 1),
    ("keying", 2),
    ("batch", 2),
    ("run_batch", 3),
    ("setup", 4),
    ("learner", 4),
    ("products", 5),
    ("errors", 4),
    ("books", 4),
    ("records", 3),
]


def timed(phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = CLOCK[0]()
        try:
            return fn(*args, **kwargs)
        finally:
            SPENT[phase] += CLOCK[0]() - t0

    return wrapper


def timed_generator(phase: str, fn: Callable[..., Generator[Any, Any, Any]]) -> Callable[..., Any]:
    """A learner generator whose sends (each step's work) are timed; its creation is not work yet."""

    def wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
        inner = fn(*args, **kwargs)
        sent = None
        while True:
            t0 = CLOCK[0]()
            try:
                out = inner.send(sent)
            except StopIteration:
                return
            finally:
                SPENT[phase] += CLOCK[0]() - t0
            sent = yield out

    return wrapper


def instrument() -> None:
    from runner.execute import batching, worker
    from tasks import get_task
    from tasks.deep_linear import batch_tracker, batched, flops

    worker.run_items = timed_generator("executor", worker.run_items)
    worker._run_batch = timed_generator("batch", worker._run_batch)
    worker._record = timed("records", worker._record)
    for keying in ("batch_member", "_member"):  # its name before issue 30: _member
        if hasattr(batching, keying):
            setattr(batching, keying, timed("keying", getattr(batching, keying)))
    task = type(get_task("deep_linear"))
    task.run_batch = timed("run_batch", task.run_batch)
    batched.prepare = timed("setup", batched.prepare)
    batched._gd = timed_generator("learner", batched._gd)
    batched._bcgd = timed_generator("learner", batched._bcgd)
    flops.FlopCounter.mm = timed("products", flops.FlopCounter.mm)
    batched._Errors.__call__ = timed("errors", batched._Errors.__call__)
    for books in (batch_tracker.BatchTracker, batch_tracker.MemberTrackers):
        for method in ("start", "step", "results"):
            setattr(books, method, timed("books", getattr(books, method)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", type=int, default=64)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    args = ap.parse_args()
    grid_clock = time.perf_counter
    if args.clock == "cpu":
        CLOCK[0], grid_clock = time.thread_time, time.process_time
    from runner import run_grid
    from runner.execute.local import LocalExecutor
    from runner.execute.worker import configure_threads

    configure_threads(1)
    instrument()
    print(f"{header()}; {args.clock} clock", flush=True)
    n = args.configs
    with tempfile.TemporaryDirectory() as tmp:
        for label, task, fixed, axes in cases(n):
            if task != "deep_linear" or f"width {args.width} " not in label:
                continue
            grid = grid_of(label, task, fixed, axes)
            best: dict[bool, tuple[float, dict[str, float]]] = {}
            for r in range(args.repeats + 1):  # the first of each is a warm-up (imports, first calls)
                for batch in (True, False):
                    SPENT.clear()
                    executor = LocalExecutor(batch=batch, **ONE)
                    t0 = grid_clock()
                    run_grid(
                        {**grid, "name": f"g{r}{batch}"}, Path(tmp, f"{label}-{r}-{batch}"), QUIET, executor=executor
                    )
                    SPENT["grid"] = grid_clock() - t0
                    if r and (batch not in best or SPENT["grid"] < best[batch][0]):
                        best[batch] = (SPENT["grid"], dict(SPENT))
            phases = best[True][1]
            print(f"\n{label}: {n} members, batched, ms per member (inclusive)")
            for phase, depth in TREE:
                print(f"  {'  ' * depth}{phase:<{14 - 2 * depth}} {1e3 * phases.get(phase, 0.0) / n:8.3f}")
            one = 1e3 * best[False][0] / n
            print(f"  one at a time {one:.2f} ms per run; speed-up {best[False][0] / best[True][0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
