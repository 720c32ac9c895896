"""What `convgrid run` and `convgrid tune` share: where results go, how runs execute, and the exit code."""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from runner.errors import ConfigError, redact
from runner.execute.options import EXECUTOR_KINDS, ExecutionOptions, FlushPolicy
from runner.settings import env_name, settings


# argparse turns the ValueError of a `type` into "argument --threads: invalid positive_int value: '-2'"
# and exit 2, before anything is written; each says what range is valid.
def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a whole number >= 1")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number > 0")
    return value


def nonnegative_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number >= 0")
    return value


RESULTS_ROOT_HELP = "results root: a path or a pyarrow URI (default ./results)"


def add_results_root(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The positional results root of the commands that read a store (report, check, status, ...); `p`."""
    p.add_argument("results", nargs="?", default="results", metavar="RESULTS", help=RESULTS_ROOT_HELP)
    return p


def add_execution_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default="results", help=RESULTS_ROOT_HELP)
    p.add_argument(
        "--executor",
        default="auto",
        choices=EXECUTOR_KINDS,
        help="ray, local (in-process), or auto (default): local for work the stored run times say takes under "
        "CONVGRID_SMALL_WORK_S (3 s), less than starting Ray; else the embedded Ray, with cells run in process "
        "while it starts (a grid that ends first never waits for it; a study starts Ray only once its timed trials "
        "say Ray saves more than CONVGRID_RAY_COST_S, 5 s); ray with --address, --timeout or --gpus-per-worker",
    )
    p.add_argument(
        "--address", default=None, help="join a Ray cluster: auto, HOST:PORT or ray://HOST:PORT (default: embedded)"
    )
    p.add_argument("--workers", type=positive_int, default=None, help="number of actors (default: one per CPU slot)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch/BLAS threads per actor (default 1)")
    p.add_argument(
        "--gpus-per-worker",
        type=positive_float,
        default=None,
        help="GPU share of each actor for tasks that compute on a GPU, e.g. 0.25: four actors per GPU, each capped "
        "at a quarter of its memory (default: no GPU actors)",
    )
    p.add_argument("--timeout", type=positive_float, default=None, help="per-run time limit in seconds")
    p.add_argument(
        "--grace",
        type=nonnegative_float,
        default=ExecutionOptions.grace_s,
        help=f"seconds a run may ignore its deadline before its actor is killed (default {ExecutionOptions.grace_s:g})",
    )
    p.add_argument(
        "--flush-every",
        type=positive_int,
        default=FlushPolicy.every,
        help=f"write a part file every N finished runs (default {FlushPolicy.every})",
    )
    p.add_argument(
        "--flush-seconds",
        type=positive_float,
        default=FlushPolicy.seconds,
        help=f"write parts at least every S seconds (default {FlushPolicy.seconds:g}): a crash loses at most that "
        "much finished work",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar or lines")
    p.add_argument(
        "--slurm",
        nargs=argparse.REMAINDER,
        metavar="SBATCH_OPTION",
        default=None,
        help="submit this command as a SLURM batch job instead (cluster/slurm.sbatch: a Ray head and workers on the "
        "job's nodes, this driver on the first); every argument after --slurm is an sbatch option "
        "(--nodes=2 --gpus-per-task=1 --time=4:00:00 ...). The script is written to RESULTS/slurm/",
    )
    p.add_argument(
        "--checkpoint-every",
        type=nonnegative_float,
        default=None,
        help="seconds between a run's checkpoints, for learners that save them (default: the grid file's "
        "checkpoint_every, else every 10 s, stretched so that saving costs under 1 %% of a run); a killed or "
        "preempted run resumes from its last one",
    )
    p.add_argument("--no-checkpoints", action="store_true", help="save no checkpoints and resume from none")
    p.add_argument(
        "--preempt-grace",
        type=nonnegative_float,
        default=ExecutionOptions.preempt_grace_s,
        help="on SIGTERM, seconds running runs get to save their state and stop; they resume with the next "
        f"command (default {ExecutionOptions.preempt_grace_s:g})",
    )
    p.add_argument(
        "--no-batch",
        action="store_true",
        help="run every cell alone, never as a batched call of cells with equal batch keys (comparisons, debugging)",
    )


def check_results_root(results: str) -> None:
    """A local results root must be a folder this process can write (or one it can create): checked
    before anything runs, so a typo costs a message, not a traceback after the first batch."""
    if "://" not in results:  # an object store answers for itself
        check_writable_folder(Path(results), "--results", "the results root")


def check_writable_folder(path: Path, key: str, what: str) -> None:
    """`path` is a folder this process can write, created if absent; else a ConfigError naming `key`."""
    if path.is_symlink() and not path.exists():
        raise ConfigError(
            f"{what} is a symbolic link to {os.readlink(path)}, which does not exist; create that folder "
            f"or give {key} another path",
            key=key,
        )
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{what} is a file, not a folder", key=key)
    try:
        path.mkdir(parents=True, exist_ok=True)
        # os.access says yes to root everywhere; a real file says what the filesystem allows.
        with tempfile.TemporaryFile(dir=path, prefix=".convgrid-probe-"):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write {what}: {exc.strerror or exc}", key=key) from None


def execution_options(args: argparse.Namespace) -> ExecutionOptions:
    """The one options object of a command, from the options above."""
    return ExecutionOptions(
        executor=args.executor,
        address=args.address,
        workers=args.workers,
        threads=args.threads,
        gpus_per_worker=args.gpus_per_worker,
        timeout_s=args.timeout,
        grace_s=args.grace,
        batch=not args.no_batch,
        flush=FlushPolicy(args.flush_every, args.flush_seconds),
        progress=not args.no_progress,
        checkpoint_every_s=args.checkpoint_every,
        checkpoints=not args.no_checkpoints,
        preempt_grace_s=args.preempt_grace,
    )


def submit_to_slurm(args: argparse.Namespace, name: str, what: str) -> int:
    """`--slurm`: this command, without --slurm and what follows it, as a SLURM job (cluster.slurm);
    prints the job id, the script and the job's output file."""
    from cluster import slurm

    if args.address is not None:
        raise ConfigError("--slurm starts its own Ray cluster in the job: leave --address out", key="--address")
    if getattr(args, "dry_run", False):
        raise ConfigError("--dry-run runs nothing: run it without --slurm", key="--slurm")
    argv: list[str] = args.argv
    driver_args = argv[: len(argv) - len(args.slurm) - 1]  # the command line before --slurm
    slurm.check_grace(args.slurm, getattr(args, "preempt_grace", ExecutionOptions.preempt_grace_s))
    job = slurm.submit(driver_args, args.slurm, name, what, args.results, ray=args.executor != "local")
    print(f"submitted SLURM job {job.job_id}: script {job.script}, output {job.output}")
    return 0


def join_cluster(args: argparse.Namespace) -> None:
    """Join the cluster named by --address before anything runs, so that an unreachable address or a
    missing auth token is one clear message, and a head lost mid-run is noticed (cluster.head_lost);
    then check --threads and --workers against the CPUs there are (this machine's, without --address)."""
    if args.executor == "local" or args.address is None:
        cpus = os.cpu_count() or 1
        check_sizes(args, cpus, f"this machine has {cpus} CPUs", "this machine", workers=args.executor != "local")
        return
    if getattr(args, "dry_run", False):
        return
    from cluster import connect
    from runner.execute.learner_env import runtime_env

    ray = connect(args.address, runtime_env=runtime_env(), watch_head=True)
    total, largest = cluster_cpus(ray)
    where = f"the cluster at {args.address}"
    check_sizes(args, largest, f"the largest node of {where} has {largest} CPUs", where, cpus=total)


def cluster_cpus(ray: Any) -> tuple[int, int]:
    """(CPUs of the joined cluster, CPUs of its largest node) as Ray counts them now."""
    nodes = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
    return int(ray.cluster_resources().get("CPU", 0)), int(max(nodes, default=0))


def check_sizes(
    args: argparse.Namespace, largest: int, has: str, where: str, cpus: int | None = None, workers: bool = True
) -> None:
    """--threads within the CPUs of the largest machine there is (`has` says so), --workers within the
    CPU slots of that many threads among `cpus` (default: `largest`): 100,000 threads per actor crashed
    torch's thread pool, and 100,000 actors took the driver and Ray's GCS past 8 GB each. An
    autoscaling cluster may grow past what it has now: CONVGRID_MAX_WORKERS."""
    cpus = largest if cpus is None else cpus
    if args.threads > max(largest, 1):
        raise ConfigError(
            f"{args.threads} threads per worker, but {has} (valid: 1 to {max(largest, 1)})", key="--threads"
        )
    ceiling = settings().max_workers or max(1, cpus // args.threads)
    if workers and args.workers is not None and args.workers > ceiling:
        why = (
            f"{env_name('max_workers')} is {ceiling}"
            if settings().max_workers
            else f"{where} has {cpus} CPUs, {ceiling} slots of --threads {args.threads}"
            + (
                f"; an autoscaling cluster may set {env_name('max_workers')} to its full size"
                if where != "this machine"
                else ""
            )
        )
        raise ConfigError(f"{args.workers} workers, but {why} (valid: 1 to {ceiling})", key="--workers")


def outcome(what: str, counts: Counter[str], skipped_failed: int, results: str) -> int:
    """The exit code of `run` and `tune`: 1 when the command ends with failed or timed-out runs (those it
    ran, and those that failed before and that it leaves as they are without --retry-failed), with one
    line on stderr saying how to see them; else 0. `diverged` and `pruned` are results, not failures: a
    rerun that runs nothing because every cell is done exits 0."""
    from tasks.status import FAILED, TIMEOUT

    said = [
        f"{counts[FAILED]} failed" if counts[FAILED] else "",
        f"{counts[TIMEOUT]} timed out" if counts[TIMEOUT] else "",
        f"{skipped_failed} failed or timed out before (not run again)" if skipped_failed else "",
    ]
    if not any(said):
        return 0
    print(
        f"convgrid: {what} runs: {', '.join(filter(None, said))}; `convgrid status {redact(results)}` lists them "
        "with their errors; --retry-failed runs them again",
        file=sys.stderr,
    )
    return 1
