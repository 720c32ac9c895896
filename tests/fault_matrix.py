"""The fault matrix of docs/reliability.md: real signals at random moments against a real driver.

Each trial starts `convgrid run` (Ray executor, default flush policy) as a subprocess joined to a
shared Ray by --address, on a grid of `faulty` runs that each sleep `run_s` and then write their
finish time to a probe folder (a witness outside the store). Once some runs have finished, it waits
a random extra moment and sends the signal. Then it compares the store with the probe log:

    lost        runs that finished more than the flush window (+1 s of grace) before the signal
                and are not in the store
    duplicated  physical runs rows beyond one per run
    corrupt     stored runs the probe never saw finish, or a store that does not read

    python -m tests.fault_matrix --moments 20          # the whole matrix (make faults), a markdown table
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
FLUSH_S = 2.0  # the command line's default --flush-seconds
GRACE_S = 1.0  # scheduling slack on top of the flush window (a loaded 2-core machine)


@dataclass
class Outcome:
    finished_before: int  # runs the probe saw finish more than the window before the signal
    stored: int
    lost: int
    duplicated: int
    corrupt: int
    exit_code: int


def _grid(folder: Path, run_s: float, n: int, probe: Path) -> Path:
    params = {"sleep_s": run_s, "probe_dir": str(probe)}
    grid = {
        "name": f"faults_{run_s:g}",
        "blocks": [{"task": "faulty", "params": params, "product": {"x": list(range(n))}}],
    }
    path = folder / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def _stored(root: Path) -> tuple[list[float], bool]:
    """x of every physical runs row, and whether the store read cleanly."""
    import pyarrow.dataset as ds

    if not (root / "runs").exists():
        return [], True
    try:
        table = ds.dataset(root / "runs", partitioning="hive").to_table(columns=["x"])
    except Exception:  # noqa: BLE001 - an unreadable store is what this counts
        return [], False
    return [float(v) for v in table["x"].to_pylist()], True


def trial(address: str, run_s: float, n: int, signum: int, seed: int, workers: int = 2) -> Outcome:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="convgrid-fault-") as tmp:
        folder = Path(tmp)
        probe = folder / "finished"
        probe.mkdir()
        root = folder / "results"
        grid = _grid(folder, run_s, n, probe)
        cmd = [sys.executable, "-m", "runner.cli", "run", str(grid), "--results", str(root), "--address", address]
        cmd += ["--workers", str(workers), "--no-progress"]
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        first = rng.randint(1, max(1, n // 3))
        deadline = time.monotonic() + 600
        while proc.poll() is None and len(list(probe.iterdir())) < first and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, max(2 * run_s, FLUSH_S + GRACE_S + 0.5)))
        t_signal = time.time()
        if proc.poll() is None:
            proc.send_signal(signum)
        code = proc.wait(timeout=120)
        finished = {float(p.name): float(p.read_text()) for p in probe.iterdir()}
        rows, readable = _stored(root)
        stored = set(rows)
        window = FLUSH_S + GRACE_S
        before = {x for x, t in finished.items() if t < t_signal - window}
        return Outcome(
            finished_before=len(before),
            stored=len(stored),
            lost=len(before - stored),
            duplicated=len(rows) - len(stored),
            corrupt=len(stored - set(finished)) + (0 if readable else 1),
            exit_code=code,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--moments", type=int, default=20, help="kill moments per row (default 20)")
    parser.add_argument("--long-s", type=float, default=15.0, help="length of the long runs (default 15 s)")
    args = parser.parse_args()
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["CONVGRID_LEARNERS"] = "faulty=tests.toy_learner"
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(REPO))
    from cluster import connect, shutdown_if_owned

    ray = connect(None, num_cpus=2)
    address = ray.get_runtime_context().gcs_address
    rows = [
        ("driver SIGKILL", signal.SIGKILL, 0.05, 200),
        ("driver SIGKILL", signal.SIGKILL, args.long_s, 8),
        ("driver SIGTERM", signal.SIGTERM, 0.05, 200),
        ("driver SIGINT", signal.SIGINT, 0.05, 200),
    ]
    print("| fault | run length | moments | finished before the window | lost | duplicated | corrupt | exit codes |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for label, signum, run_s, n in rows:
            outcomes = [trial(address, run_s, n, signum, seed) for seed in range(args.moments)]
            codes = sorted({o.exit_code for o in outcomes})
            print(
                f"| {label} | {run_s:g} s | {len(outcomes)} | {sum(o.finished_before for o in outcomes)} | "
                f"{sum(o.lost for o in outcomes)} | {sum(o.duplicated for o in outcomes)} | "
                f"{sum(o.corrupt for o in outcomes)} | {', '.join(map(str, codes))} |",
                flush=True,
            )
    finally:
        shutdown_if_owned()


if __name__ == "__main__":
    main()
