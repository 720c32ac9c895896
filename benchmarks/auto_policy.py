"""Does `--executor auto` choose right for a small grid? Spawn to exit of `convgrid run` re-run after an
edit, which leaves a few cells to run in a store that knows their run times:

  auto (as typed)   the policy (runner.execute.auto): the stored times say the work is short, so it
                    runs in process and never starts Ray
  auto, no rule     CONVGRID_SMALL_WORK_S=0: the same command without that rule takes the warm start
                    (Ray starts in a thread while the cells run in process)
  ray               --executor ray: every cell on the embedded Ray

    python benchmarks/auto_policy.py [--repeats 3] [--new 8]

Each contender is a process of its own; a round runs the contenders in rotated order on fresh copies of
one store; printed are each contender's seconds (min / median / max) and its ratio to `auto (as typed)`
within a round. The last line reads `auto_policy: no-rule/auto min M median D; ray/auto min R median E`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.machine import header  # noqa: E402 - after the path

BASE = {"task": "least_squares", "params": {"d_in": 20, "d_out": 2, "m": 40, "n_iters": 200, "tol": 1e-300}}


def grid(lrs: list[float]) -> dict[str, object]:
    return {"name": "auto_policy", "blocks": [{**BASE, "product": {"lr": lrs}}]}


def convgrid(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=REPO, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new", type=int, default=8, help="cells the edit adds (default 8)")
    args = parser.parse_args()
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    env["RAY_worker_niceness"] = "0"  # every contender's processes at the benchmark's niceness
    print(f"auto_policy: {header()}; {args.new} new cells of least squares")
    contenders = {
        "auto (as typed)": ([], {}),
        "auto, no rule": ([], {"CONVGRID_SMALL_WORK_S": "0"}),
        "ray": (["--executor", "ray"], {}),
    }
    with tempfile.TemporaryDirectory() as tmp:
        old = [0.001 * (i + 1) for i in range(32)]
        new = [0.0005 + 0.001 * i for i in range(args.new)]
        first, edited = Path(tmp, "first.yaml"), Path(tmp, "edited.yaml")
        first.write_text(yaml.safe_dump(grid(old)))
        edited.write_text(yaml.safe_dump(grid(old + new)))
        seed = Path(tmp, "seed")
        convgrid(["run", str(first), "--results", str(seed), "--executor", "local", "--no-progress"], env)
        seconds: dict[str, list[float]] = {name: [] for name in contenders}
        ratios: dict[str, list[float]] = {name: [] for name in contenders}
        names = list(contenders)
        for round_ in range(args.repeats):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            this: dict[str, float] = {}
            for name in order:
                extra, knobs = contenders[name]
                root = Path(tmp, f"r{round_}-{name.replace(' ', '_')}")
                shutil.copytree(seed, root)
                cmd = ["run", str(edited), "--results", str(root), "--no-progress", *extra]
                this[name] = convgrid(cmd, {**env, **knobs})
                seconds[name].append(this[name])
            for name in names:
                ratios[name].append(this[name] / this["auto (as typed)"])
        for name in names:
            s, r = seconds[name], ratios[name]
            print(
                f"  {name:16s} {min(s):6.2f} / {statistics.median(s):6.2f} / {max(s):6.2f} s"
                f"   x auto: {min(r):.2f} / {statistics.median(r):.2f} / {max(r):.2f}"
            )
        nr, ry = ratios["auto, no rule"], ratios["ray"]
        print(
            f"auto_policy: no-rule/auto min {min(nr):.2f} median {statistics.median(nr):.2f}; "
            f"ray/auto min {min(ry):.2f} median {statistics.median(ry):.2f}"
        )


if __name__ == "__main__":
    main()
