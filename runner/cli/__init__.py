"""`convgrid ...`: the command line.

Exit codes: 0 all good; 1 `run` or `tune` ended with failed or timed-out runs (one line on stderr says
how to see them; runner.cli.outcome), or `check --strict` found a surprise; 2 bad input (one message,
nothing written); 3 the Ray cluster cannot be reached or was lost; 75 another driver runs the study
(nothing changed: run it again later; runner.coord.study_lease); 128 + N stopped by signal N."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from cluster import ClusterError, head_lost, shutdown_if_owned
from runner import errors
from runner.cli.options import (
    add_execution_options,
    add_results_root,
    check_results_root,
    check_writable_folder,
    execution_options,
    join_cluster,
    outcome,
    positive_float,
    positive_int,
    submit_to_slurm,
)
from runner.cli.process_exit import exit_process
from runner.errors import (
    EXIT_BUSY,
    STORE_ERRNOS,
    Busy,
    ConfigError,
    StoreIOError,
    StoreWriteError,
    Terminated,
    printable,
    raise_terminated,
    redact,
)
from runner.execute.checkpointing import begin_preemption, preempted
from runner.settings import settings
from runner.store.checkpoints import CHECKPOINTS_DIR

if TYPE_CHECKING:
    from runner.grid.cells import CellSource
    from runner.store import ResultStore


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convgrid", description="Grids of convergence experiments on Ray; results in Parquet."
    )
    parser.add_argument(
        "--version", action=VersionAction, help="print the version and the code's git commit (and uncommitted changes)"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def on_store(name: str, help: str) -> argparse.ArgumentParser:
        """A subcommand that reads the store at its RESULTS argument."""
        return add_results_root(sub.add_parser(name, help=help))

    run = sub.add_parser("run", help="run every cell of a grid that is not yet in the store")
    run.add_argument(
        "grid", nargs="?", help="grid YAML file (optional with --only: the run's params come from the store)"
    )
    add_execution_options(run)
    run.add_argument("--retry-failed", action="store_true", help="also run again cells that failed or timed out")
    run.add_argument(
        "--only", action="append", metavar="RUN_ID", help="run (again) just this run id (a prefix is enough)"
    )
    run.add_argument("--dry-run", action="store_true", help="print what would run; write nothing")
    run.add_argument(
        "--lease",
        type=positive_float,
        default=None,
        help="drivers sharing a grid on one store take over a driver silent this many seconds "
        "(default CONVGRID_LEASE_S or 30)",
    )
    run.add_argument(
        "--max-cells",
        type=positive_int,
        default=None,
        help="refuse grids of more cells than this (default CONVGRID_MAX_CELLS or 10,000,000)",
    )

    tasks = sub.add_parser("tasks", help="list tasks, or one task's params")
    tasks.add_argument("name", nargs="?")

    compact = on_store("compact", "merge small part files; readers see the same results")
    compact.add_argument(
        "--repair",
        action="store_true",
        help="move damaged part files to RESULTS/_store/quarantine; runs whose rows were there run again",
    )

    report = on_store("report", "figures, grids, failures and provenance as Markdown and HTML")
    report.add_argument("--out", default=None, help="output folder (default RESULTS/report)")

    check = on_store("check", "the claims table: each paper claim decided on the stored runs")
    check.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a verdict on a complete full grid differs from the expected one",
    )
    check.add_argument("--all", action="store_true", help="list every registered claim, not only those with runs")

    on_store("status", "done / failed / diverged / pruned / missing per task and grid")

    from runner.cli.logs import add_parser as add_logs_parser
    from runner.cli.tune import add_parser as add_tune_parser

    add_logs_parser(sub)
    add_tune_parser(sub)
    return parser


class VersionAction(argparse.Action):
    """`convgrid --version`: found when asked (a `git status`), not each time the parser is built."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from runner.execute.provenance import own_code_version

        print(own_code_version().describe())
        parser.exit()


def cmd_run(args: argparse.Namespace) -> int:
    from runner.grid.cells import Grid
    from runner.grid.spec import load_grid
    from runner.run.grid_run import run_grid
    from runner.run.rerun import cells_from_store, errors_of
    from runner.store import ResultStore

    if args.grid is None and not args.only:
        raise ConfigError("give a grid file, or --only RUN_ID to rerun a stored run", key="grid")
    grid: CellSource
    if args.grid is not None:
        grid = load_grid(args.grid, max_cells=args.max_cells)
    else:
        grid = Grid("rerun", redact(str(args.results)), "", cells_from_store(ResultStore(args.results), args.only))
    if args.dry_run:
        return _dry_run(grid, ResultStore(args.results), args.retry_failed, args.only)
    if args.slurm is not None:
        return submit_to_slurm(args, grid.name, f"convgrid run of grid {grid.name} ({len(grid)} cells)")
    join_cluster(args)  # first: --threads and --workers are checked against the cluster before anything is written
    check_results_root(args.results)
    report = run_grid(
        grid, args.results, execution_options(args), retry_failed=args.retry_failed, only=args.only, lease_s=args.lease
    )
    print(report.line())
    if args.only:  # a rerun is how one debugs a run: its whole error, traceback included
        for rid, status, error in errors_of(ResultStore(args.results), grid, args.only):
            print(f"convgrid: run {rid} {status}:\n{error.rstrip()}", file=sys.stderr)
    return outcome(grid.name, report.counts, report.skipped_failed, args.results)


def _dry_run(grid: CellSource, store: ResultStore, retry_failed: bool, only: list[str] | None) -> int:
    from runner.run.plan import only_indices, plan_grid

    planned = plan_grid(grid, store, retry_failed)
    todo = planned.todo
    if only:  # --only reruns its cells whatever the store holds (runner.run.grid_run)
        todo = only_indices(grid, only)
        if not len(todo):
            raise ConfigError("no cell of this grid has that run id", file=grid.source, key="--only")
    print(printable(f"{grid.name} ({grid.source}): {len(grid)} cells over tasks {', '.join(grid.tasks())}"))
    print(f"  done: {planned.done}   failed/timeout skipped: {planned.skipped}   to run: {len(todo)}")
    if len(todo) and store.files.exists(CHECKPOINTS_DIR):  # a store without checkpoints: no line, no cost
        from runner.run.growth import plan_growth

        print(plan_growth(store, grid.cells_at(todo)).line())
    for cell in grid.cells_at(todo[:5]):
        print(f"  {cell.run_id[:12]} {cell.task} {json.dumps(cell.params_json(), sort_keys=True)}")
    if len(todo) > 5:
        print(f"  ... and {len(todo) - 5} more")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    from runner.cli.describe import describe_task, list_tasks

    print(describe_task(args.name) if args.name else list_tasks())
    return 0


def _existing_store(results: str) -> ResultStore:
    """The store at `results`, with whatever a killed command left there restored first."""
    from runner.store import ResultStore

    if "://" not in results and not Path(results).is_dir():
        raise ConfigError("no such results root", file=results, key="results")
    store = ResultStore(results)
    store.recover()
    if not store.tasks() and (below := _roots_below(results)):  # `results/` where `make demo` wrote `results/demo`
        print(f"convgrid: {redact(results)} holds no runs; results roots below it: {', '.join(below)}", file=sys.stderr)
    return store


def _roots_below(results: str) -> list[str]:
    """Results roots one or two folders below a local `results` (each a folder with a runs/ folder)."""
    if "://" in results:
        return []
    return sorted(str(runs.parent) for pattern in ("*/runs", "*/*/runs") for runs in Path(results).glob(pattern))


def cmd_compact(args: argparse.Namespace) -> int:
    from runner.store.compact import compact

    print(compact(_existing_store(args.results), repair=args.repair).line())
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from analysis.report import build_report

    if "://" in args.results and not args.out:
        raise ConfigError("the report of an object-store results root needs --out (a local folder)", key="--out")
    store = _existing_store(args.results)
    out = Path(args.out or Path(args.results) / "report")
    check_writable_folder(out, "--out", "the report folder")
    report = build_report(store.root, out)
    n_images = sum(len(s.images) for s in report.sections)
    print(f"report: {out / 'report.html'} and {out / 'report.md'} ({report.contents()}, {n_images} figures)")
    for section in report.sections:
        for image in section.images:
            print(f"  figure: {image}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from analysis.claims import evaluate

    table = evaluate(_existing_store(args.results).root)
    print(printable(table.format(show_all=args.all), keep="\n\t"))
    print(f"\n{table.summary(show_all=args.all)}")
    return 1 if args.strict and any(r.surprising for r in table.results) else 0


def cmd_status(args: argparse.Namespace) -> int:
    from runner.store.status import store_status

    print(printable(store_status(_existing_store(args.results)).format(), keep="\n\t"))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from runner.cli.logs import run_logs

    print(run_logs(_existing_store(args.results), args.run_id, args.all), end="")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from runner.cli.tune import cmd_tune as tune
    from runner.store import ResultStore

    ResultStore(args.results).recover()  # what a killed command left is restored before the study reads
    return tune(args)


COMMANDS = {
    "run": cmd_run,
    "tasks": cmd_tasks,
    "status": cmd_status,
    "compact": cmd_compact,
    "report": cmd_report,
    "check": cmd_check,
    "tune": cmd_tune,
    "logs": cmd_logs,
}


M_MMAP_THRESHOLD = -3  # glibc's mallopt(3) parameter
MMAP_THRESHOLD = 256 * 1024


def driver_allocators() -> None:
    """How the driver's memory is allocated, so that reading a store in batches does not keep what a
    batch held (measured planning a million cells against a million stored runs, peak RSS):
    - Arrow's buffers come from malloc, not from Arrow's bundled mimalloc, which kept tens of MB more
      resident than it had ever allocated (Arrow's own count, `max_memory`, was 13 MB): 193 -> 171 MB.
      (Arrow tracks mimalloc 2.2's peak memory in apache/arrow#47266 and microsoft/mimalloc#1111.)
    - glibc's malloc serves blocks of 256 KB and more by mmap, and gives them back when freed. By
      default it raises that threshold to the largest block freed so far (up to 32 MB), after which
      batches of a few MB come from the heap, which fragments and is not given back: 171 -> 160 MB,
      against 153 MB at 100,000 cells (mallopt(3); no effect, and skipped, where libc has no mallopt).
    The driver reads streamed batches, where both are as fast."""
    import contextlib
    import ctypes

    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def preempt_or_terminate(signum: int, frame: object) -> None:
    """SIGTERM: preempt the runs in flight where some are (then the command ends 143 once they are back,
    or at the grace's end by this signal again), else unwind at once like Ctrl-C."""
    if hasattr(signal, "alarm"):
        signal.alarm(0)  # Ray's abort timer (see runner.errors.raise_terminated)
    if begin_preemption(lambda: os.kill(os.getpid(), signal.SIGTERM)):
        return
    raise_terminated(signum, frame)


def console() -> NoReturn:
    """The `convgrid` command (and `python -m runner.cli`): `main`, then the process ends without the
    interpreter's teardown (runner.cli.process_exit)."""
    exit_process(main())


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # --slurm writes the command line before it into the job's script
    if args.command != "tasks":
        driver_allocators()
    # SIGTERM (schedulers, `kill`) and SIGHUP (a closed terminal) unwind like Ctrl-C: flush, stop workers.
    # While runs execute, SIGTERM first preempts them (they save their state and stop, within
    # --preempt-grace; runner.execute.checkpointing); a second SIGTERM, or the grace's end, unwinds.
    signal.signal(signal.SIGTERM, preempt_or_terminate)
    signal.signal(signal.SIGHUP, raise_terminated)
    try:
        settings()  # every CONVGRID_ knob checked before anything starts (a malformed one is exit 2, naming it)
        code = COMMANDS[args.command](args)
        if preempted():
            print(
                "convgrid: stopped by SIGTERM; finished runs are in the store and running ones saved their state; "
                "rerun the same command to resume them",
                file=sys.stderr,
            )
            shutdown_if_owned()
            return 128 + signal.SIGTERM
        # Everything is committed: stop the embedded Ray now rather than in Ray's exit hook, which first
        # sleeps half a second for workers' last log lines (docs/architecture.md, "Start-up and teardown").
        shutdown_if_owned()
        return code
    except ConfigError as exc:
        print(f"convgrid: error: {exc}", file=sys.stderr)
        return 2
    except ClusterError as exc:
        print(f"convgrid: error: {exc}", file=sys.stderr)
        return 3
    except Busy as exc:  # another driver holds what this command needs; it changed nothing
        print(f"convgrid: error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_BUSY
    except (StoreIOError, StoreWriteError) as exc:
        print(f"convgrid: error: {exc}", file=sys.stderr)
        return 4
    except BrokenPipeError:  # `convgrid ... | head`: the reader left; not an error of ours (before OSError: one)
        sys.stderr.close()
        return 0
    except OSError as exc:
        if exc.errno not in STORE_ERRNOS:
            raise
        # the store's own writes outside a flush (members, trials, compaction): the same one message
        print(f"convgrid: error: {StoreIOError(getattr(args, 'results', ''), exc)}", file=sys.stderr)
        return 4
    except KeyboardInterrupt as exc:
        lost = head_lost()
        if lost is not None:
            # The interrupt came from the head watch. Leave without Ray's exit hooks: they would wait a
            # minute for the dead head and then abort with a C++ fatal error.
            print(f"convgrid: error: {lost}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(3)
        signum: int | None = exc.signum if isinstance(exc, Terminated) else None
        if signum is None and errors.received:
            signum = errors.received[-1]
        if signum is None:
            print(
                "convgrid: interrupted; finished runs are in the store, rerun the same command to resume",
                file=sys.stderr,
            )
            return 130
        name = signal.Signals(signum).name
        print(
            f"convgrid: stopped by {name}; finished runs are in the store, rerun the same command to resume",
            file=sys.stderr,
        )
        return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
