"""The loopback simulation behind docs/scale.md: what one driver can ingest when workers stage their
curves (issue 27), measured on this machine.

    python benchmarks/ingest_sim.py store  [--runs 20480] [--flush 256] [--runs-per-part 32]
    python benchmarks/ingest_sim.py actors [--actors 4,8,16] [--run-s 0.2] [--runs 1200] [--steps 1000]
    python benchmarks/ingest_sim.py nodes  [--nodes 4] [--cpus 2] [--runs 1200] [--steps 1000]
    python benchmarks/ingest_sim.py parts  [--parts 1000,10000,100000] [--flush 256]

`store`: the commit rate of the store for manifests alone, no Ray: runs' curves pre-staged in parts of
`--runs-per-part` runs (as workers write them), then committed by `write_records` in flushes of
`--flush` runs, one after the other (the group-commit writer thread runs them the same way when flushes
queue): runs/s and commits/s, and the driver's CPU per run. The commit with curve rows in the records
(the old path) is measured beside it on the same runs.

`actors`: N actors on the embedded Ray (N logical CPUs on however many cores there are), each run of
`--steps` curve rows lasting `--run-s` seconds (sleeping, as a GPU run waits for its device), so the
runs arrive at ~N / run_s a second whatever the cores: the driver's CPU seconds per second of wall
clock (its load) and per run, for each N. What one driver would reach at 100% of one core follows.

`nodes`: a `ray.cluster_utils.Cluster` of `--nodes` nodes of `--cpus` CPUs on this machine, one actor
per CPU: the start-up probe finds every node, every node's actors stage (their folders under the
session), and the driver's CPU per run is that of one node's.

`parts`: what a flush costs as a task's curves/ folder fills with parts between compactions (a part per
run, for runs whose curves are long): curves/ is given P parts (copies of one small part under part
names of their own), then flushes of `--flush` staged runs are timed (after one that reads the parts'
footers, which a driver does once per process).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from ingest_learner.bench import prepare, synth_grid

prepare()

from runner.execute.options import ExecutionOptions  # noqa: E402 - after the environment above
from runner.execute.ray_pool import RayExecutor  # noqa: E402
from runner.run.grid_run import run_grid  # noqa: E402

QUIET = ExecutionOptions(progress=False)


def store_rate(args: argparse.Namespace) -> None:
    from runner.execute.base import WorkItem
    from runner.execute.staging import Stager, StagingTarget, open_target
    from runner.execute.worker import run_item
    from runner.grid.schema import task_schemas
    from runner.grid.spec import load_grid
    from runner.store import ResultStore
    from runner.store.flush import write_records
    from runner.store.incoming import session_folder

    cells = load_grid(synth_grid("store", args.runs, args.steps)).cells
    records = [run_item(WorkItem(c.run_id, c.task, c.params_json())) for c in cells]
    with tempfile.TemporaryDirectory(prefix="convgrid-sim-") as tmp:
        for name in ("old", "new"):
            root = Path(tmp, name)
            store = ResultStore(root)
            sent = records
            if name == "new":  # what the workers do, before the driver's clock starts
                target = StagingTarget(str(root), session_folder(), frozenset(), rows=args.runs_per_part * args.steps)
                stager = Stager(target, open_target(str(root)), clock=lambda: 0.0)
                sent = [r for rec in records for r in stager.offer(rec)] + stager.drain()
            cpu0, t0 = time.process_time(), time.perf_counter()
            for i in range(0, len(sent), args.flush):
                write_records(store, sent[i : i + args.flush], task_schemas)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            commits = -(-len(sent) // args.flush)
            print(
                f"store {name}: {len(sent)} runs of {args.steps} curve rows in {commits} commits of {args.flush}: "
                f"{len(sent) / wall:,.0f} runs/s, {commits / wall:.1f} commits/s, driver CPU "
                f"{cpu / len(sent) * 1e3:.3f} ms/run"
            )
            shutil.rmtree(root)


def actors_rate(args: argparse.Namespace) -> None:
    from cluster import connect, shutdown_if_owned

    counts = [int(n) for n in args.actors.split(",")]
    connect(None, num_cpus=max(counts))
    with tempfile.TemporaryDirectory(prefix="convgrid-sim-") as tmp:
        for n in counts:
            pool = RayExecutor(workers=n, batch=False)
            pool.start()
            run_grid(synth_grid(f"warm{n}", 2 * n, 10), Path(tmp, f"warm{n}"), QUIET, executor=pool)
            cpu0, t0 = time.process_time(), time.perf_counter()
            report = run_grid(
                synth_grid(f"actors{n}", args.runs, args.steps, args.run_s), Path(tmp, f"a{n}"), QUIET, executor=pool
            )
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            nodes = len(pool.staging.nodes) if pool.staging else 0
            pool.close()
            assert report.counts.get("ok") == args.runs, report.counts
            rate = args.runs / wall
            print(
                f"actors {n}: {rate:,.0f} runs/s ({n / args.run_s:,.0f} offered), driver load {cpu / wall:.3f} "
                f"CPU s/s, {cpu / args.runs * 1e3:.3f} ms CPU/run; staging nodes {nodes}"
            )
            shutil.rmtree(Path(tmp, f"a{n}"))
    shutdown_if_owned()


def nodes_rate(args: argparse.Namespace) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from cluster import connect
    from runner.store.txn import INCOMING_DIR

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": args.cpus})
    for _ in range(args.nodes - 1):
        cluster.add_node(num_cpus=args.cpus)
    cluster.wait_for_nodes()
    connect(cluster.address)
    try:
        with tempfile.TemporaryDirectory(prefix="convgrid-sim-") as tmp:
            pool = RayExecutor(address=cluster.address, batch=False)
            pool.start()
            placed = {ray.get(a.placement.remote())[0] for a in pool.actors}
            folder = pool.stage_to(str(Path(tmp, "results").resolve()))
            writers: set[str] = set()
            assert folder is not None and pool.staging is not None
            # which actors staged: each writes under a folder of its own (w<pid>); seen before the discard
            original = pool.execute

            def watching(items, channel=None):  # type: ignore[no-untyped-def]
                for records in original(items, channel):
                    writers.update(r.staged.path.split("/")[3] for r in records if r.staged is not None)
                    yield records

            pool.execute = watching  # type: ignore[method-assign]
            cpu0, t0 = time.process_time(), time.perf_counter()
            report = run_grid(synth_grid("nodes", args.runs, args.steps), Path(tmp, "results"), QUIET, executor=pool)
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            assert report.counts.get("ok") == args.runs, report.counts
            print(
                f"nodes {args.nodes} x {args.cpus} CPUs: {len(pool.actors)} actors on {len(placed)} nodes, the probe "
                f"found {len(pool.staging.nodes)} reach the root; {len(writers)} actors staged under {INCOMING_DIR}; "
                f"{args.runs / wall:,.0f} runs/s, driver CPU {cpu / args.runs * 1e3:.3f} ms/run"
            )
            pool.close()
    finally:
        ray.shutdown()
        cluster.shutdown()


def parts_cost(args: argparse.Namespace) -> None:
    from runner.execute.base import WorkItem
    from runner.execute.staging import Stager, StagingTarget, open_target
    from runner.execute.worker import run_item
    from runner.grid.schema import task_schemas
    from runner.grid.spec import load_grid
    from runner.store import ResultStore
    from runner.store.flush import write_records
    from runner.store.incoming import session_folder
    from runner.store.part_names import expected, new_id

    cells = load_grid(synth_grid("parts", 6 * args.flush + 1, 100)).cells
    records = [run_item(WorkItem(c.run_id, c.task, c.params_json())) for c in cells]
    with tempfile.TemporaryDirectory(prefix="convgrid-sim-") as tmp:
        for count in (int(n) for n in args.parts.split(",")):
            root = Path(tmp, f"p{count}")
            store = ResultStore(root)
            write_records(store, records[:1], task_schemas)  # one real part of each folder
            folder = root / "curves" / "task=synth"
            (seed,) = folder.iterdir()
            size_crc = seed.name.split("-", 3)[3]  # <size>-<crc>.parquet: what the copies' names must record
            assert expected(seed.name) is not None
            data = seed.read_bytes()
            for _ in range(count - 1):
                (folder / f"part-{new_id()}-{size_crc}").write_bytes(data)
            target = StagingTarget(str(root), session_folder(), frozenset(), rows=32 * 100)
            stager = Stager(target, open_target(str(root)), clock=lambda: 0.0)
            sent = [r for rec in records[1:] for r in stager.offer(rec)] + stager.drain()
            flushes = [sent[i : i + args.flush] for i in range(0, len(sent), args.flush)]
            t0 = time.perf_counter()
            write_records(store, flushes[0], task_schemas)  # reads the footers of the parts (once a process)
            first = time.perf_counter() - t0
            times = []
            for flush in flushes[1:]:
                t0 = time.perf_counter()
                write_records(store, flush, task_schemas)
                times.append(time.perf_counter() - t0)
            print(
                f"parts {count:,} in curves/: first flush {first * 1e3:,.0f} ms (footers read), then "
                f"{sorted(times)[len(times) // 2] * 1e3:,.1f} ms per flush of {args.flush} runs "
                f"(median of {len(times)})"
            )
            shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    s = sub.add_parser("store")
    s.add_argument("--runs", type=int, default=20_480)
    s.add_argument("--steps", type=int, default=1000)
    s.add_argument("--flush", type=int, default=256)
    s.add_argument("--runs-per-part", type=int, default=32)
    a = sub.add_parser("actors")
    a.add_argument("--actors", default="4,8,16")
    a.add_argument("--run-s", type=float, default=0.2)
    a.add_argument("--runs", type=int, default=1200)
    a.add_argument("--steps", type=int, default=1000)
    n = sub.add_parser("nodes")
    n.add_argument("--nodes", type=int, default=4)
    n.add_argument("--cpus", type=int, default=2)
    n.add_argument("--runs", type=int, default=1200)
    n.add_argument("--steps", type=int, default=1000)
    f = sub.add_parser("parts")
    f.add_argument("--parts", default="1000,10000,100000")
    f.add_argument("--flush", type=int, default=256)
    args = parser.parse_args()
    jobs = {
        "store": store_rate,
        "actors": actors_rate,
        "nodes": nodes_rate,
        "parts": parts_cost,
    }
    jobs[args.what](args)


if __name__ == "__main__":
    main()
