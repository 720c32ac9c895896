"""Command-line options shared by `convgrid run` and `convgrid tune`: where results go and how runs execute."""

from __future__ import annotations

import argparse
from typing import Any


def add_execution_options(p: argparse.ArgumentParser, flush_every: bool = True) -> None:
    p.add_argument("--results", default="results", help="results root: a path or a pyarrow URI (default ./results)")
    p.add_argument("--executor", default="ray", choices=["ray", "local"], help="ray (default) or local (in-process)")
    p.add_argument(
        "--address", default=None, help="join a Ray cluster: auto, HOST:PORT or ray://HOST:PORT (default: embedded)"
    )
    p.add_argument("--workers", type=int, default=None, help="number of actors (default: one per CPU slot)")
    p.add_argument("--threads", type=int, default=1, help="torch/BLAS threads per actor (default 1)")
    p.add_argument("--timeout", type=float, default=None, help="per-run time limit in seconds")
    p.add_argument(
        "--grace",
        type=float,
        default=5.0,
        help="seconds a run may ignore its deadline before its actor is killed (default 5)",
    )
    if flush_every:
        p.add_argument(
            "--flush-every", type=int, default=256, help="write a part file every N finished runs (default 256)"
        )
    p.add_argument(
        "--flush-seconds",
        type=float,
        default=2.0,
        help="write parts at least every S seconds (default 2): a crash loses at most that much finished work",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar or lines")


def executor_options(args: argparse.Namespace) -> dict[str, Any]:
    """The executor keyword arguments the options above ask for."""
    return {
        "address": args.address,
        "workers": args.workers,
        "threads": args.threads,
        "timeout_s": args.timeout,
        "grace_s": args.grace,
    }


def join_cluster(args: argparse.Namespace) -> None:
    """Join the cluster named by --address before anything runs, so that an unreachable address or a
    missing auth token is one clear message, and a head lost mid-run is noticed (cluster.head_lost)."""
    if args.executor != "ray" or args.address is None or getattr(args, "dry_run", False):
        return
    from cluster import connect
    from runner.execute.learner_env import runtime_env

    connect(args.address, runtime_env=runtime_env(), watch_head=True)
