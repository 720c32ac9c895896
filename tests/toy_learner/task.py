"""A task for fault tests: real arithmetic, plus ways to fail that real learners should not have."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from tasks.base import FieldType, Result, RunContext, TaskParams


class FaultyParams(TaskParams):
    x: float = Field(1.0, description="value whose square is the result")
    fail: bool = Field(False, description="raise inside run")
    sleep_s: float = Field(0.0, ge=0.0, description="cooperative work time (reports every 10 ms)")
    hang_s: float = Field(0.0, ge=0.0, description="time spent ignoring the deadline")
    weights: list[float] | None = Field(None, description="if set, the result adds sum((w - 1)^2): a vector to tune")
    poison: bool = Field(False, description="return a summary value the store cannot take (a string for a float)")
    probe_dir: str | None = Field(None, description="if set, each finished run touches probe_dir/<run x> (fault tests)")
    ledger: str | None = Field(None, description="if set, each finished run appends '<x> <pid>' to this file")
    talk: str | None = Field(
        None, description="if set, the run prints it to stdout and stderr, warns it and logs it (issue 46's tests)"
    )
    talk_times: int = Field(1, ge=1, description="how many times the run prints `talk` to stdout")
    die_after_talk: str | None = Field(
        None, description="if set, the first attempt (this file its witness) SIGKILLs its own process after talking"
    )
    die_staging: str | None = Field(
        None, description="if set, the worker is SIGKILLed once (this file its witness) right after it stages curves"
    )


class FaultyTask:
    """Squares x; may raise, or sleep cooperatively, or hang ignoring its deadline."""

    name: ClassVar[str] = "faulty"
    version: ClassVar[str] = "1"
    Params: ClassVar[Any] = FaultyParams
    summary_fields: ClassVar[dict[str, FieldType]] = {"square": "float"}
    curve_fields: ClassVar[dict[str, FieldType]] = {"value": "float"}
    examples: ClassVar[list[dict[str, Any]]] = [{"x": 2.0}]
    diverging_example: ClassVar[dict[str, Any] | None] = None

    def run(self, p: FaultyParams, ctx: RunContext) -> Result:
        if p.talk is not None:
            for i in range(p.talk_times):
                print(f"stdout {i}: {p.talk}")
            print(f"stderr: {p.talk}", file=sys.stderr)
            warnings.warn(f"warning: {p.talk}", UserWarning, stacklevel=1)
            logging.getLogger("tests.toy_learner").warning("logging: %s", p.talk)
        if p.die_after_talk is not None and not os.path.exists(p.die_after_talk):
            Path(p.die_after_talk).write_text(f"{os.getpid()}\n")
            time.sleep(1.5)  # past run_output.LIVE_EVERY_S: the worker's live copy of the output is written
            os.kill(os.getpid(), signal.SIGKILL)
        if p.fail:
            raise RuntimeError(f"asked to fail with x={p.x}")
        if p.die_staging is not None:  # the ingest fault tests: a worker dead between staging and its manifest
            from tests.kill_at import install_once

            install_once("incoming:staged", p.die_staging)
        step = 0
        t_end = time.time() + p.sleep_s
        while time.time() < t_end:
            step += 1
            time.sleep(0.01)
            if not ctx.report(step, value=p.x):
                return Result(status=ctx.stop_status(), n_steps=step)
        time.sleep(p.hang_s)
        if p.probe_dir is not None:  # the fault tests' witness of when a run finished, outside the store
            Path(p.probe_dir, f"{p.x:g}").write_text(f"{time.time()}\n")
        if p.ledger is not None:  # one short O_APPEND write per run: lines of concurrent drivers never mix
            with open(p.ledger, "a") as ledger:
                ledger.write(f"{p.x:g} {os.getpid()}\n")
        square: Any = p.x * p.x + sum((w - 1.0) ** 2 for w in p.weights or [])
        if p.poison:
            square = f"not a number: {square}"  # passes the protocol, fails the float column
        return Result(status="ok", summary={"square": square}, curve={"step": [0], "value": [p.x]}, n_steps=1)


TASK = FaultyTask
