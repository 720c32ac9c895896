"""`convgrid logs RUN_ID [RESULTS]`: what a run printed, warned and logged (runner.store.logs)."""

from __future__ import annotations

import argparse

from runner.cli.options import add_results_root
from runner.errors import ConfigError, printable
from runner.store import ResultStore
from runner.store.logs import AttemptLog, logged_runs, read_logs


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "logs",
        help="what a run printed to stdout and stderr, its warnings and logging records",
        description="The output of a run's newest attempt (every attempt's with --all), its last 64 Ki characters.",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="a run id, or a prefix of one that names one run")
    add_results_root(p)
    p.add_argument("--all", action="store_true", help="every stored attempt of the run, oldest first")


def run_logs(store: ResultStore, wanted: str, every: bool) -> str:
    """The text `convgrid logs` prints; a ConfigError when the prefix names no run or several."""
    if not wanted:
        raise ConfigError("give a run id or a prefix of one", key="RUN_ID")
    logged = sorted(r for r in logged_runs(store) if r.startswith(wanted))
    if len(logged) > 1:
        shown = ", ".join(r[:16] for r in logged[:5]) + (" ..." if len(logged) > 5 else "")
        raise ConfigError(f"{len(logged)} runs with logs match {wanted!r} ({shown}): give more of the id", key="RUN_ID")
    if not logged:
        stored = [t for t in store.tasks() if _has_run(store, t, wanted)]
        if stored:
            return f"run {wanted}: stored; it wrote nothing (no output, warning or logging record) and had no error\n"
        raise ConfigError(f"no stored run has run id {wanted!r}", file=store.root, key="RUN_ID")
    attempts = read_logs(store, logged)
    chosen = attempts if every else attempts[-1:]
    return "\n".join(_format(a, i, len(attempts), every) for i, a in enumerate(chosen, 1))


def _has_run(store: ResultStore, task: str, prefix: str) -> bool:
    return any(r.startswith(prefix) for r in store.read_runs(task, columns=[])["run_id"].to_pylist())


def _format(attempt: AttemptLog, number: int, total: int, every: bool) -> str:
    when = attempt.finished.isoformat(timespec="seconds") if attempt.finished else "?"
    which = f"attempt {number} of {total}" if every else f"newest of {total} attempts with output"
    head = f"==> run {attempt.run_id} ({attempt.task}, {attempt.status}, {which}, finished {when}) <=="
    body = attempt.log.rstrip()
    if attempt.error:
        body += f"\n--- its error ---\n{attempt.error.rstrip()}"
    # a run's own text: shown, never obeyed (escape sequences printed as text)
    return f"{head}\n{printable(body.lstrip(chr(10)), keep=chr(10) + chr(9))}\n"
