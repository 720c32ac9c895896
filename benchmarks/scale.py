"""Grids of 10k, 100k and 1M trivial cells: what each driver command costs, from process spawn to exit.

    python benchmarks/scale.py [--sizes 10000,100000,1000000] [--run-max 100000] [--repeats 3] [--against TREE]

For each size a fresh results root and a fresh cache of validated blocks (CONVGRID_CACHE), then, each
command its own `convgrid` process timed from spawn to exit with its peak memory (ru_maxrss from
wait4):
  run (least_squares d_in=d_out=m=n_iters=1 on the local executor; sizes up to --run-max),
  dry-run (cold: an empty cache of its own, every block's ids computed), dry-run (warm: blocks from
  the cache), re-submit with every cell done, status, analysis.load of the task,
  re-submit with one cell edited (a one-cell block's lr changed).
Sizes above --run-max are not run (a million trivial cells take tens of minutes here): their store is
filled instead, as a compacted store would hold them, with one runs part of a row per cell (a real
run's row, copied under each cell's run id, status ok) and the grid's members; the commands after
`run` are then measured against it.
The grid: one block `product: {lr: 10 values}, repeat: size/10`, plus a one-cell block (the one
edited). The dry-runs and the commands after `run` repeat `--repeats` times, interleaved with a
baseline process that only imports the driver (`python -c "import runner.run.grid_run"`): printed are
min/median/max of seconds and of the ratio to the baseline within each round (the machine is shared;
ratios travel better). `--against TREE` runs each of those commands a second time in every round
from another source tree (say, a `git archive` of the commit before a change) with this Python,
labelled "against": a before/after measured interleaved on the same loaded machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
LRS = [0.001 * (i + 1) for i in range(10)]


def grid_text(size: int, edited: bool = False, second: bool = False) -> str:
    """The grid of `size` + 1 cells; `second`: as many other cells (other step sizes), another grid."""
    one = 0.78 if edited else 0.77
    lrs = [lr + 0.0005 for lr in LRS] if second else LRS
    return (
        f"name: scale{size}{'-second' if second else ''}\n"
        "blocks:\n"
        "  - task: least_squares\n"
        "    params: {d_in: 1, d_out: 1, m: 1, n_iters: 1}\n"
        f"    product: {{lr: {lrs}}}\n"
        f"    repeat: {size // 10}\n"
        "  - task: least_squares\n"
        f"    params: {{d_in: 1, d_out: 1, m: 1, n_iters: 1, lr: {one}, seed: 7}}\n"
    )


def fill_store(results: str, grid: str, env: dict[str, str]) -> None:
    """Store every cell of `grid` as done without running it: one real run's row (a cell outside the
    grid, run by `convgrid run`) copied under each cell's run id into one runs part, and the members."""
    template = Path(results).parent / "template.yaml"
    template.write_text(
        "name: template\nblocks:\n  - task: least_squares\n"
        "    params: {d_in: 1, d_out: 1, m: 1, n_iters: 1, lr: 0.5, seed: 999999}\n"
    )
    timed(convgrid("run", str(template), "--results", results, "--executor", "local", "--no-progress"), env)
    fill = (
        "import pyarrow as pa, pyarrow.parquet as pq, numpy as np\n"
        "from runner.run.members import write_grid_members\n"
        "from runner.grid.spec import load_grid\n"
        "from runner.store import ResultStore\n"
        f"store, grid = ResultStore({results!r}), load_grid({grid!r})\n"
        "row = pq.read_table(store.files.abs(store.parts('runs/task=least_squares')[0]))  # the file's own schema\n"
        "table = row.take(np.zeros(len(grid.ids), dtype=np.int64))\n"
        "table = table.set_column(0, row.schema.field(0), pa.array(grid.ids.astype(str), pa.string()))\n"
        "store.write_part(table, 'runs/task=least_squares')\n"
        "write_grid_members(store, grid)\n"
    )
    timed([PY, "-c", fill], env)


def timed(argv: list[str], env: dict[str, str], cwd: Path = REPO) -> tuple[float, float, str]:
    """(seconds from spawn to exit, peak resident MB, last output line) of one process run in `cwd`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{out[-2000:]}")
    lines = [ln for ln in out.strip().splitlines() if ln.strip()]
    return wall, usage.ru_maxrss / 1024, (lines[-1] if lines else "")[:110]


def spread(values: list[float]) -> str:
    return f"{min(values):7.2f} {statistics.median(values):7.2f} {max(values):7.2f}"


def convgrid(*args: str) -> list[str]:
    return [PY, "-m", "runner.cli", *args]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--run-max", type=int, default=100_000, help="run the cells only for sizes up to this")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--against", type=Path, help="another source tree whose cold dry-run joins every round")
    ap.add_argument(
        "--second-run", action="store_true", help="last, run as many other cells into the same store (twice the runs)"
    )
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; times in s (spawn to exit), memory in MB")
    baseline = [PY, "-c", "import runner.run.grid_run"]
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"scale{size}-") as tmp:
            root, results = Path(tmp), str(Path(tmp) / "results")
            env = {**os.environ, "CONVGRID_CACHE": str(root / "cache"), "OMP_NUM_THREADS": "1"}
            (root / "grid.yaml").write_text(grid_text(size))
            (root / "edited.yaml").write_text(grid_text(size, edited=True))
            grid, edited = str(root / "grid.yaml"), str(root / "edited.yaml")
            cells = size + 1
            print(f"\n== {cells:,} cells")
            dry_run = convgrid("run", grid, "--dry-run", "--results", results)
            ran = size <= args.run_max
            if ran:
                argv = convgrid("run", grid, "--results", results, "--executor", "local", "--no-progress")
                wall, mb, last = timed(argv, env)
                print(f"{'run':<24} {wall:8.2f} s {mb:7.0f} MB   {last}")
            else:
                fill_store(results, grid, env)
                print(f"{'run':<24} (not run: the store filled with every cell done, as a compacted store)")
                timed(dry_run, env)  # fills the cache the warm dry-run reads
            repeated = [
                ("dry-run (cold)", dry_run),
                ("dry-run (warm)", dry_run),
                ("re-submit, all done", convgrid("run", grid, "--results", results, "--no-progress")),
                ("status", convgrid("status", results)),
                (
                    "analysis.load",
                    [PY, "-c", f"import analysis; print(len(analysis.load({results!r}, 'least_squares')))"],
                ),
            ]
            trees: dict[str, Path] = {}  # label -> the source tree it runs from, where not this one
            if args.against is not None:  # each command twice in a round: this tree's, then the other's
                repeated = [twin for label, argv in repeated for twin in ((label, argv), (f"{label}, against", argv))]
                trees.update({label: args.against.resolve() for label, _ in repeated if label.endswith("against")})
            seconds: dict[str, list[float]] = {label: [] for label, _ in repeated}
            ratios: dict[str, list[float]] = {label: [] for label, _ in repeated}
            peak: dict[str, float] = {}
            last_line: dict[str, str] = {}
            for _ in range(args.repeats):
                base, _, _ = timed(baseline, env)
                for label, argv in repeated:
                    # cold: an empty cache folder of its own, so every block's ids are computed afresh
                    cold = {**env, "CONVGRID_CACHE": tempfile.mkdtemp(dir=tmp)} if "cold" in label else env
                    wall, mb, last = timed(argv, cold, trees.get(label, REPO))
                    seconds[label].append(wall)
                    ratios[label].append(wall / base)
                    peak[label] = max(peak.get(label, 0.0), mb)
                    last_line[label] = last
            print(f"{'':<24} {'seconds min/median/max':>23}   {'/ import baseline':>23}   peak MB")
            for label, _ in repeated:
                numbers = f"{spread(seconds[label])}   {spread(ratios[label])}   {peak[label]:7.0f}"
                print(f"{label:<24} {numbers}   {last_line[label]}")
            # Last: it runs the edited cell, after which the grid is no longer "all done".
            edited_run = convgrid("run", edited, "--results", results, "--executor", "local", "--no-progress")
            wall, mb, last = timed(edited_run, env)
            print(f"{'re-submit, one edited':<24} {wall:8.2f} s {mb:7.0f} MB   {last}")
            if ran and args.second_run:  # the run's peak where the store already holds a run of this size
                (root / "second.yaml").write_text(grid_text(size, second=True))
                second = convgrid("run", str(root / "second.yaml"), "--results", results, "--executor", "local")
                wall, mb, last = timed([*second, "--no-progress"], env)
                print(f"{'run into that store':<24} {wall:8.2f} s {mb:7.0f} MB   {last}")


if __name__ == "__main__":
    main()
