"""Where the wall time of one `convgrid run` goes, from process spawn to exit.

    python benchmarks/startup_timeline.py [--runs 2000] [-- CONVGRID RUN OPTIONS, e.g. --executor ray]

Runs the grid of benchmarks/vs_sequential_and_ray_tune.py (`--runs` least_squares runs of ~10 ms) in
a fresh process whose executors and Ray start are wrapped to print timestamps (seconds since spawn):
imports done, ray.init called and returned, actors created, each executor's first and last record
(with when the first record's run started), executor closed, the command returned, the last exit hook
(registered first, so it runs after Ray's), and the process's exit as its parent saw it. The wrappers
only observe; the child's output goes to a file, so the exit is not held up by pipes that Ray's
processes inherit.
"""

from __future__ import annotations

import argparse
import atexit
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
T0_ENV = "CONVGRID_TIMELINE_T0"


def _mark(t0: float) -> Callable[[str], None]:
    def mark(event: str) -> None:
        print(f"TL {time.time() - t0:7.3f} {event}", file=sys.stderr, flush=True)

    return mark


def _wrap_execute(cls: Any, mark: Callable[[str], None], t0: float) -> None:
    original = cls.execute

    def execute(self: Any, items: Any, channel: Any = None, doorbell: Any = None) -> Iterator[Any]:
        mark(f"{self.name}.execute entered")
        n, first = 0, True
        for records in original(self, items, channel, doorbell):
            if records and first:
                first = False
                mark(f"{self.name}: first record (its run started at {records[0].row['started'].timestamp() - t0:.3f})")
            n += len(records)
            yield records
        mark(f"{self.name}: last record, {n} records")

    cls.execute = execute


def child(argv: list[str]) -> int:
    t0 = float(os.environ[T0_ENV])
    mark = _mark(t0)
    mark("interpreter up")
    atexit.register(mark, "last exit hook (after Ray's)")
    sys.path.insert(0, str(REPO))
    from runner.cli import main

    mark("runner.cli imported")
    connect = sys.modules["cluster.connect"]
    init = connect._init

    def timed_init(*args: Any, **kwargs: Any) -> None:
        mark("ray imported, ray.init called")
        init(*args, **kwargs)
        mark("ray.init returned")

    connect._init = timed_init
    from runner.execute import local, ray_pool

    for cls in (ray_pool.RayExecutor, local.LocalExecutor):
        _wrap_execute(cls, mark, t0)
    start, close = ray_pool.RayExecutor.start, ray_pool.RayExecutor.close

    def timed_start(self: Any) -> None:
        fresh = not self.actors
        start(self)
        if fresh:
            mark(f"{len(self.actors)} actors created")

    def timed_close(self: Any) -> None:
        close(self)
        mark("ray executor closed")

    ray_pool.RayExecutor.start, ray_pool.RayExecutor.close = timed_start, timed_close
    code = main(argv)
    mark(f"convgrid run returned {code}")
    from benchmarks.as_typed import end_as_the_command_does

    end_as_the_command_does(code)  # the exit hooks run there too, the timeline's last one included
    return code


def main() -> None:
    if T0_ENV in os.environ:
        sys.exit(child(sys.argv[1:]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("options", nargs=argparse.REMAINDER, help="options for `convgrid run`, after --")
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from benchmarks.machine import header
    from benchmarks.vs_sequential_and_ray_tune import grid_yaml

    print(header(), flush=True)

    options = [o for o in args.options if o != "--"]
    with tempfile.TemporaryDirectory(prefix="timeline-") as tmp:
        Path(tmp, "grid.yaml").write_text(grid_yaml(args.runs))
        cmd = [sys.executable, __file__, "run", f"{tmp}/grid.yaml", "--results", f"{tmp}/res", "--no-progress"]
        t0 = time.time()
        with open(Path(tmp, "out.txt"), "w") as out:
            proc = subprocess.Popen([*cmd, *options], env={**os.environ, T0_ENV: repr(t0)}, stdout=out, stderr=out)
            code = proc.wait()
        end = time.time() - t0
        for line in Path(tmp, "out.txt").read_text().splitlines():
            if line.startswith("TL ") or code:
                print(line)
        print(f"TL {end:7.3f} process exited ({code}); load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
