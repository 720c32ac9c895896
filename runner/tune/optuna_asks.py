"""An ask process's loop (runner.tune.ask_processes, entry point runner.tune.ask_server): its own
sampler asks trials of the study, which stay in the storage, RUNNING, for the driver to tell. Part of
the tuner's door to Optuna (runner.tune.optuna_adapter)."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING

from runner.tune.optuna_storage import quiet, reopen
from runner.tune.optuna_study import Asked, AskServer

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

ASK = "ask"
READY = "ready"


def serve_asks(conn: Connection, server: AskServer) -> None:
    """An ask process's whole life: open the study, say READY, then answer every ASK on `conn` with an
    `Asked` or, if asking failed, the error's text; end at None or when the driver is gone. Ctrl-C is
    the driver's to handle: it stops the study and then this process, after the ask under way (else a
    trial could be left half-asked)."""
    import optuna

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    quiet()
    try:
        study = optuna.load_study(
            study_name=server.study_name,
            storage=reopen(server.where),
            sampler=server.optuna_sampler,
            pruner=optuna.pruners.NopPruner(),  # the driver prunes: it sees the runs' values
        )
    except Exception as exc:  # noqa: BLE001 - the driver asks in its own process instead, and says why
        conn.send(f"{type(exc).__name__}: {exc}")
        return
    conn.send(READY)
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the driver is gone
        if message != ASK:
            return
        try:
            trial = study.ask(server.optuna_distributions)
            answer: Asked | str = Asked(trial.number, dict(trial.params))
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which asks in its own process
            answer = f"{type(exc).__name__}: {exc}"
        conn.send(answer)
