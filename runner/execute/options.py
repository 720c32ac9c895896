"""How a command's runs execute and persist: one frozen object, built once by the command line (or by a
notebook) and handed to `run_grid`, `tune` and the executor factory alike, so no option is dropped on
the way. Its defaults are the command line's defaults."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

ExecutorKind = Literal["auto", "ray", "local"]
EXECUTOR_KINDS: tuple[ExecutorKind, ...] = ("auto", "ray", "local")


@dataclass(frozen=True)
class FlushPolicy:
    """When finished runs are written: a part file every `every` runs or `seconds` seconds, whichever
    comes first (a crash loses at most that much finished work)."""

    every: int = 256
    seconds: float = 2.0


@dataclass(frozen=True)
class ExecutionOptions:
    executor: ExecutorKind = "auto"  # auto picks per command: runner.execute.auto
    address: str | None = None  # join a Ray cluster (auto, HOST:PORT, ray://...); None: the embedded one
    workers: int | None = None  # actors; None: one per CPU slot
    threads: int = 1  # torch/BLAS threads per actor (and per run in process)
    gpus_per_worker: float | None = None  # GPU actors with this share of a GPU each; None: no GPU actors
    timeout_s: float | None = None  # per-run limit: cooperative first, then the actor is killed
    grace_s: float = 5.0  # how long a run may ignore its deadline before its actor is killed
    batch: bool = True  # run cells with equal batch keys as one batched call
    flush: FlushPolicy = field(default_factory=FlushPolicy)
    progress: bool = True
    # checkpoints (runner.execute.checkpointing): seconds between a run's saves (None: the default cadence,
    # which keeps saving under 1 % of a run); `checkpoints=False` saves and resumes nothing
    checkpoint_every_s: float | None = None
    checkpoints: bool = True
    preempt_grace_s: float = 30.0  # on SIGTERM, how long running runs get to save their state and stop

    def with_(self, **changes: Any) -> ExecutionOptions:
        return replace(self, **changes)

    @property
    def needs_ray(self) -> bool:
        """What only Ray can give: a cluster, runs killed past their deadline, GPU actors."""
        return bool(self.address or self.timeout_s or self.gpus_per_worker)


def as_options(options: ExecutionOptions | ExecutorKind | None) -> ExecutionOptions:
    """Options as given, an executor kind alone as the defaults with that kind, None as the defaults."""
    if options is None:
        return ExecutionOptions()
    if isinstance(options, str):
        if options not in EXECUTOR_KINDS:
            from runner.errors import ConfigError

            raise ConfigError(f"unknown executor {options!r}", key="--executor", choices=EXECUTOR_KINDS)
        return ExecutionOptions(executor=options)
    return options
