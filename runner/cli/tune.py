"""`convgrid tune STUDY.yaml`: run an Optuna study (or one per `sweep` value) on Ray or locally."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

from runner.cli.options import (
    add_execution_options,
    check_results_root,
    execution_options,
    join_cluster,
    outcome,
    positive_int,
    submit_to_slurm,
)

if TYPE_CHECKING:
    from runner.tune.spec import StudyPlan


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "tune",
        help="run an Optuna study: trials are runs in the store, the study in a journal file or RDB",
        description="Keep `parallel` trials in flight, each told as its run finishes; re-running resumes the study.",
    )
    p.add_argument("study", help="study YAML file (see docs/tuning.md)")
    add_execution_options(p)
    p.add_argument(
        "--storage",
        default=None,
        help="Optuna storage: an RDB URL (postgresql://...) or a journal file path (default RESULTS/optuna.journal)",
    )
    p.add_argument("--n-trials", type=positive_int, default=None, help="finished trials wanted (overrides the file)")
    p.add_argument("--parallel", type=positive_int, default=None, help="trials in flight (overrides the file)")
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="mode: deterministic: ask `parallel` trials at once, tell them in trial-number order (reproducible)",
    )
    p.add_argument(
        "--retry-failed",
        action="store_true",
        help="run again stored runs that failed or timed out instead of telling FAIL",
    )
    p.add_argument("--dry-run", action="store_true", help="print the studies and what the storage holds; run nothing")
    return p


def cmd_tune(args: argparse.Namespace) -> int:
    from runner.tune.driver import tune
    from runner.tune.optuna_adapter import load_plans
    from runner.tune.spec import with_overrides

    plans = [with_overrides(p, args.n_trials, args.parallel, args.deterministic) for p in load_plans(args.study)]
    if args.dry_run:
        return _dry_run(plans, args)
    if args.slurm is not None:
        name = Path(args.study).stem
        return submit_to_slurm(args, name, f"convgrid tune of {', '.join(p.name for p in plans)}")
    join_cluster(args)  # first: --threads and --workers are checked against the cluster before anything is written
    check_results_root(args.results)
    reports = tune(plans, args.results, execution_options(args), storage=args.storage, retry_failed=args.retry_failed)
    for report in reports:
        print(report.format())
    if reports:
        print(f"dashboard: optuna-dashboard {_dashboard_target(args)}")
    names = ", ".join(r.study for r in reports)
    counts = sum((r.counts for r in reports), Counter[str]())
    code = outcome(names, counts, sum(r.skipped_failed for r in reports), args.results)
    # a study that stopped at max_failed did not get its trials: a script must not go on (where runs failed,
    # the line above says so already; here the trials failed with their runs ok)
    gave_up = [r for r in reports if r.gave_up] if code == 0 else []
    for r in gave_up:
        reasons = ", ".join(r.fail_reasons) or "see its trials"
        print(f"convgrid: study {r.study} stopped at max_failed: its FAIL trials: {reasons}", file=sys.stderr)
    return 1 if gave_up else code


def _dashboard_target(args: argparse.Namespace) -> str:
    """What to hand optuna-dashboard, printed: a storage URL's password stays out of terminals and logs."""
    from pathlib import Path

    from runner.errors import redact
    from runner.tune.driver import JOURNAL_NAME

    if args.storage is not None:
        return redact(args.storage) if "://" in args.storage else str(Path(args.storage))
    return str(Path(args.results) / JOURNAL_NAME)


def _progress(states: Counter[str], wanted: int) -> str:
    """'22 trials already (COMPLETE 12, FAIL 6, PRUNED 4); 16 of 20 finished: 4 more to run'. Finished
    trials (COMPLETE and PRUNED) are what n_trials counts; FAIL ones are asked again."""
    finished = states["COMPLETE"] + states["PRUNED"]
    by_state = ", ".join(f"{state} {n}" for state, n in sorted(states.items()))
    left = f"{max(wanted - finished, 0)} more to run" if finished < wanted else "nothing to run"
    return f"{sum(states.values())} trials already ({by_state}); {finished} of {wanted} finished: {left}"


def _dry_run(plans: list[StudyPlan], args: argparse.Namespace) -> int:
    from runner.store import ResultStore
    from runner.tune.optuna_adapter import JOURNAL_NAME, open_storage, storage_label, trial_states

    store = ResultStore(args.results)
    label, existing = storage_label(args.storage, store), {}
    if args.storage is not None and "://" in args.storage:
        journal = None  # an RDB: opening it writes nothing
    elif args.storage is not None:
        journal = Path(args.storage)
    else:
        journal = Path(store.base) / JOURNAL_NAME if store.local else None
    if journal is None or journal.exists():  # a journal not there yet is not made: a dry run writes nothing
        storage = open_storage(args.storage, store)
        label, existing = storage.label, trial_states(storage)
    for p in plans:
        space = {
            k: v.model_dump(exclude_defaults=True, exclude={"type"}) | {"type": v.type} for k, v in p.space.items()
        }
        have = existing.get(p.name)
        grouped = f", handed over {p.batch} at a time" if p.batch > 1 else ""
        print(f"{p.name} ({p.source}): task {p.task}, {p.n_trials} trials, {p.parallel} in flight{grouped}, {p.mode}")
        print(
            f"  objectives: "
            f"{', '.join(('log10 ' if o.log else '') + o.metric + ' ' + o.direction for o in p.objectives)}"
        )
        print(
            f"  sampler: {p.sampler.name} seed {p.sampler.seed} {p.sampler.options or ''}  "
            f"pruner: {p.pruner.name} {p.pruner.options or ''}"
        )
        print(f"  fixed: {json.dumps(p.fixed, sort_keys=True)}")
        print(f"  space: {json.dumps(space, sort_keys=True)}")
        if p.baselines:
            print(f"  baselines: {len(p.baselines)} runs")
        print(f"  storage {label}: " + (_progress(have, p.n_trials) if have is not None else "new study"))
    print(f"dashboard: optuna-dashboard {_dashboard_target(args)}")
    return 0
