"""The Task protocol: what every learner family gives the runner, and what it gets back.

Tasks know nothing of Ray, Optuna or Parquet. The runner knows a task only through this module:
its `name`, `version`, the pydantic `Params` type (a model, or a discriminated union of models split
by algorithm), the declared summary and curve fields, and `run`. The numerical core of a task is plain
torch functions on tensors; `run` wraps it, reports progress through `RunContext.report`, and returns
a `Result`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypeGuard, runtime_checkable

from pydantic import BaseModel, ConfigDict, model_validator

from tasks.status import ALL_STATUSES, DIVERGED, PREEMPTED, PRUNED, TIMEOUT, Status

# Column types a task may declare for its summary metrics and curve columns. Declared up front so
# the store writes an explicit schema (a metric that first appears in a late run is never dropped).
FieldType = Literal["float", "int", "bool", "str"]

# The floating dtypes a task may compute in. Here, not in tasks.common (which imports torch), so that a
# params module validates with pydantic alone.
DType = Literal["float64", "float32"]


class TaskParams(BaseModel):
    """Base of every task's parameter model.

    `extra="forbid"` turns a misspelt or foreign key into an error instead of a new run id;
    `frozen` makes params hashable and safe to share between configs of a grid.
    Everything that can change a result is a param, `seed` included.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0

    def only_when(self, name: str, ok: bool, when: str) -> None:
        """For a model validator: the variant-only param `name` may be set only where `ok` (a ValueError
        saying it is only used when `when`)."""
        if getattr(self, name) is not None and not ok:
            raise ValueError(f"{name} is only used when {when}")


@dataclass
class Outcome:
    """Where a learner's training loop ended, for its task to make the run's `Result` of: status, curve
    columns, summary, the steps taken, the step it diverged at, and its FLOPs. A learner that hands more
    (a trained net) subclasses it with keyword-only fields."""

    status: Status
    curve: dict[str, list[Any]]
    summary: dict[str, Any]
    n_steps: int
    diverged_step: int | None = None
    flops: float = 0.0


@dataclass
class Checkpoint:
    """A run's state at the end of `step`: everything its learner needs to go on from there and give,
    bit for bit, what the run uninterrupted gives.

    `tensors`: torch tensors by name (weights, optimiser moments, each `torch.Generator`'s
    `get_state()`, the problem's data where re-deriving it is costly). `state`: plain data (int, float,
    bool, str, None, and lists, tuples and str-keyed dicts of them): the curve rows logged so far, the
    summary's running parts (`iters_to_tol` once reached), counters. The runner stores both without
    pickle (`torch.load(weights_only=True)` executes no code) and checks a checksum before handing a
    checkpoint back through `RunContext.resume`; tasks never see files.
    """

    step: int
    tensors: dict[str, Any] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    # set by `RunContext.checkpoint` on the save of the run's last step (`last=True`): the state a run of
    # the same config with a larger budget may start from. Not part of what is stored with the state.
    final: bool = False


@dataclass
class RunContext:
    """What a run may know that cannot change its result.

    `report(step, **metrics)` feeds curves/pruning upstream and answers False when the run must stop
    (its deadline has passed, or a pruner said so). Tasks call it at their logging cadence and return
    promptly (status "timeout" or "pruned", see `stop_status`) when it answers False.
    """

    device: str = "cpu"
    threads: int = 1
    deadline: float | None = None  # time.time() after which the run must stop
    reporter: Callable[[int, Mapping[str, float]], bool] | None = None
    stop_reason: str | None = field(default=None, init=False)
    # Checkpoints (a learner that implements them: see `checkpoint` and `Checkpointable`).
    # `resume`: the state to start from instead of step 0: this run's own last checkpoint, or the final
    # state of a stored run of the same config with a smaller budget (`Checkpointable.growable_budget`).
    resume: Checkpoint | None = None
    # `checkpointer`: where a due checkpoint goes (the runner's store); None: the run is never saved.
    checkpointer: Callable[[Checkpoint], None] | None = None
    # `checkpoint_every`: seconds between saves (0: after every step, for tests); None: only on preemption.
    checkpoint_every: float | None = None
    # `preempt`: set by the runner on SIGTERM; the run saves at its next step and stops (status preempted).
    preempt: threading.Event | None = None
    # `keep_final`: save the state of the run's last step too (its budget may grow later).
    keep_final: bool = False
    _last_save: float = field(default_factory=time.monotonic, init=False, repr=False)

    def checkpoint(self, step: int, build: Callable[[], Checkpoint], last: bool = False) -> bool:
        """Called by a learner once per step, when the state after `step` is complete (`last`: the run
        ends after this step, by its budget or its stop rule). Saves `build()` when a save is due (the
        cadence has passed, the run is being preempted, or `last` where `keep_final`), so a learner pays
        for building its state only then. Answers False when the run must stop now: it was preempted, and its
        state is saved; the learner then returns `Result(status=PREEMPTED)` at once (`stop_status`), and
        the runner does not store it. Without a checkpointer it answers True and costs a few attribute
        reads."""
        if self.checkpointer is None:
            return True
        preempted = self.preempt is not None and self.preempt.is_set()
        now = time.monotonic()
        due = self.checkpoint_every is not None and now - self._last_save >= self.checkpoint_every
        if preempted or due or (last and self.keep_final):
            ckpt = build()
            ckpt.final = last
            self.checkpointer(ckpt)
            self._last_save = time.monotonic()
        if self.preempt is not None and self.preempt.is_set():
            self.stop_reason = PREEMPTED
            return False
        return True

    def report(self, step: int, **metrics: float) -> bool:
        if self.deadline is not None and time.time() > self.deadline:
            self.stop_reason = TIMEOUT
            return False
        if self.reporter is not None and not self.reporter(step, metrics):
            self.stop_reason = PRUNED
            return False
        return True

    def stop_status(self) -> Status:
        """Status a run returns after `report` or `checkpoint` answered False."""
        if self.stop_reason in (PRUNED, PREEMPTED):
            return self.stop_reason  # type: ignore[return-value]
        return TIMEOUT


@dataclass
class Result:
    """One run's outcome.

    `curve` maps column name -> sequence; all columns have equal length and include "step".
    `summary` holds scalar metrics, including the theory's predictions for this config where the
    spec gives them, so that analysis never needs the task code. `flops` counts the form the code
    actually computes. `diverged_step` is the step at which a diverging run was stopped.
    """

    status: Status
    summary: dict[str, Any] = field(default_factory=dict)
    curve: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    flops: float = 0.0
    n_steps: int = 0
    diverged_step: int | None = None
    error: str | None = None

    def validate(self, task: Task) -> None:
        """Raise ValueError if this result breaks the protocol for `task` (used by the runner and
        the conformance suite)."""
        if self.status not in ALL_STATUSES and self.status != PREEMPTED:
            raise ValueError(f"status {self.status!r} not in {ALL_STATUSES}")
        unknown = set(self.summary) - set(task.summary_fields)
        if unknown:
            raise ValueError(f"{task.name}: undeclared summary fields {sorted(unknown)}")
        unknown = set(self.curve) - set(task.curve_fields) - {"step"}
        if unknown:
            raise ValueError(f"{task.name}: undeclared curve fields {sorted(unknown)}")
        lengths = {k: len(v) for k, v in self.curve.items()}
        if self.curve and "step" not in self.curve:
            raise ValueError(f"{task.name}: curve has no 'step' column")
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{task.name}: curve columns of unequal length {lengths}")
        if self.status == DIVERGED and self.diverged_step is None:
            raise ValueError(f"{task.name}: diverged result without diverged_step")


class TaskIdentity(Hashable, Protocol):
    """What the driver needs of a task to validate cells and compute their run ids: its name, version
    and Params. A full Task has them; so does a learner's TaskSpec, which needs no numerical code."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def Params(self) -> Any: ...  # noqa: N802 - the protocol's attribute name, shared with Task


@dataclass(frozen=True, eq=False)
class TaskSpec:
    """A learner's identity without its numerical code. A learner's `params` module defines `SPEC =
    TaskSpec(...)` and its Task class takes name, version and Params from it, so that the driver
    plans (validates cells, computes run ids) without importing torch; see tasks.registry.get_spec.
    Compared by identity: a union Params is not hashable, and each learner has exactly one SPEC."""

    name: str
    version: str
    Params: Any


class FromSpec:
    """The identity of a learner's Task class, taken from its SPEC: `class XTask(FromSpec, spec=SPEC)`
    has SPEC's name, version and Params. The version is bumped in the learner's params.py, where the
    driver reads it without importing the task's numerical code."""

    name: ClassVar[str]
    version: ClassVar[str]
    Params: ClassVar[Any]

    def __init_subclass__(cls, spec: TaskSpec | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if spec is not None:
            cls.name, cls.version, cls.Params = spec.name, spec.version, spec.Params


@runtime_checkable
class Task(Hashable, Protocol):
    """A learner family.

    name: registry key; version: bump when results would change (part of every run id).
    Params: a TaskParams subclass or an `Annotated[Union[...], Field(discriminator=...)]` of them.
    summary_fields / curve_fields: declared column types (curve always has an int "step" too).
    examples: configs for the conformance suite, as raw dicts; `diverging_example` really diverges
    (or is None where the task's algorithms cannot).
    Optional: `devices`, the devices the task computes on through `ctx.device` (see `device_for`), and
    `thread_safe = True` where runs of the task may run at once in threads of one process (see
    `is_thread_safe`).
    """

    name: ClassVar[str]
    version: ClassVar[str]
    Params: ClassVar[Any]
    summary_fields: ClassVar[dict[str, FieldType]]
    curve_fields: ClassVar[dict[str, FieldType]]
    examples: ClassVar[list[dict[str, Any]]]
    diverging_example: ClassVar[dict[str, Any] | None]

    def run(self, p: Any, ctx: RunContext) -> Result: ...


@runtime_checkable
class Checkpointable(Task, Protocol):
    """A task whose runs can be saved and resumed, and whose budget can grow.

    Its `run` (and `run_batch`, where batchable) starts from `ctx.resume` when that is set (the state
    after step `ctx.resume.step`), calls `ctx.checkpoint(step, build)` once per step, and returns
    `Result(status=ctx.stop_status())` at once when that answers False. A run resumed from any of its
    checkpoints gives a Result equal bit for bit to the run uninterrupted: summary, curve, flops,
    n_steps, status (tests/test_checkpoint_conformance.py checks every example of every learner that
    declares it). So every random draw after the resumed step comes from generators restored from the
    checkpoint, and the curve rows logged before it come back from `state`.

    `growable_budget(p)`: the name of p's budget param (`n_iters`, `epochs`, ...) when a run of the same
    config with a larger budget follows exactly the trajectory of this one and then goes on (no schedule,
    cadence or stop rule that depends on the total), so the runner may start it from this run's final
    state; None where the trajectory depends on the budget. The learner passes `last=True` to the
    `ctx.checkpoint` call of its run's last step; where the runner keeps final states
    (`ctx.keep_final`), that call saves whatever the cadence says.
    """

    def growable_budget(self, p: Any) -> str | None: ...


def is_checkpointable(task: object) -> TypeGuard[Checkpointable]:
    """Whether `task` declares checkpoints (a `growable_budget` method; its `run` honours `ctx.resume`
    and `ctx.checkpoint`). A task without it still runs as before: from step 0, never saved."""
    return callable(getattr(task, "growable_budget", None))


@runtime_checkable
class BatchableTask(Task, Protocol):
    """A task that can run many configs of one shape as one batched computation (HFTA-style: batched
    matmuls or `torch.func.vmap` over a leading config axis).

    `batch_key(p)`: configs with equal keys (never None) may share a batch: the key holds everything
    that fixes tensor shapes and the algorithm (dims, depth, width, algorithm, dtype, n_iters...), not
    what varies per member (seed, init scale, step size, coefficients). None means "run alone".
    `batch_bytes(p)`: the device memory one member needs, so the executor can size batches for memory.
    `run_batch(ps, ctxs)`: one Result per member, in order, each equal to `run(p, ctx)` of that member
    alone (float64: to 1e-12 relative; run ids, statuses, steps, curves identical). `ctxs` are the
    members' own contexts (same device and threads, each with its own deadline and reporter): a member
    that diverges, or whose `ctx.report` answers False, stops alone at its own step with the status and
    `diverged_step` its single run would have; the others go on.
    """

    def batch_key(self, p: Any) -> Hashable | None: ...

    def batch_bytes(self, p: Any) -> int: ...

    def run_batch(self, ps: Sequence[Any], ctxs: Sequence[RunContext]) -> list[Result]: ...


def one_batch_key(task: str, keys: Iterable[Hashable | None]) -> None:
    """`run_batch`'s guard: the members' batch keys must be one (a ValueError naming the keys otherwise)."""
    distinct = set(keys)
    if len(distinct) != 1:
        raise ValueError(f"{task} run_batch needs configs of one batch key, got {sorted(map(str, distinct))}")


_BATCHABLE: dict[type, bool] = {}


def is_batchable(task: object) -> TypeGuard[BatchableTask]:
    """`isinstance(task, BatchableTask)`, decided once per task class: the runtime protocol check reads
    every member of Task and BatchableTask (~20 us), and the executor asks it of every cell it keys.
    A learner is one instance of a class whose methods are the class's, so its class decides."""
    cls = type(task)
    if cls not in _BATCHABLE:
        _BATCHABLE[cls] = isinstance(task, BatchableTask)
    return _BATCHABLE[cls]


def device_for(task: Task, device: str) -> str:
    """The device a run of `task` computes on in a worker that holds `device`. A task that computes on
    `ctx.device` says so with a class attribute `devices` (say `("cpu", "cuda")`); without it a task
    runs on the CPU, and a GPU pool gives it CPU actors."""
    kind = device.split(":")[0]
    return device if kind in getattr(task, "devices", ("cpu",)) else "cpu"


def is_thread_safe(task: Task) -> bool:
    """Whether runs of `task` may run at once in threads of one process (the in-process executor's
    `--workers`), each giving bit for bit what it gives alone. A task declares it with a class attribute
    `thread_safe = True` once its runs share no mutable state: every random draw from the run's own
    seeded `torch.Generator` (never `torch.manual_seed`, the global `torch`/`numpy`/`random` streams or
    an `nn.Module`'s default init), no module-level cache written without a lock, no process-wide
    setting changed (`torch.set_default_dtype`, `torch.set_num_threads`, anomaly mode) inside `run`.
    Undeclared means no: such a task runs one run at a time (tests/test_thread_safety.py checks every
    shipped learner that declares it)."""
    return getattr(task, "thread_safe", False) is True


def is_diverged(value: float, limit: float = 1e150) -> bool:
    """A metric that is NaN, infinite or astronomically large means the learner diverged."""
    return not math.isfinite(value) or abs(value) > limit


def tagged_union(tag: str, default: str | None, *models: type[TaskParams]) -> Any:
    """A discriminated union of param models on the Literal field `tag`, where a config that omits the
    tag gets `default` (pydantic's plain discriminator insists on the tag being present)."""
    from typing import Annotated, Union, get_args

    from pydantic import Discriminator, Tag

    def pick(value: Any) -> Any:
        if isinstance(value, dict):
            return value.get(tag, default)
        return getattr(value, tag, default)

    members = tuple(Annotated[m, Tag(get_args(m.model_fields[tag].annotation)[0])] for m in models)
    return Annotated[Union[members], Discriminator(pick)]  # noqa: UP007 - a runtime-built union


def fills_defaults(fill: Callable[[Any, dict[str, Any]], None]) -> Any:
    """A params model's mode="before" validator from `fill(cls, params)`, which sets in a copy of the raw params
    the values a variant resolves its unset params to (raw params that are no dict go on to pydantic's errors).
    Use it as a decorator in the model's body, in place of `@model_validator(mode="before")` and `@classmethod`."""

    def validator(cls: Any, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        out = dict(data)
        fill(cls, out)
        return out

    validator.__name__ = validator.__qualname__ = fill.__name__
    validator.__doc__ = fill.__doc__
    before: Any = model_validator(mode="before")  # typed for functions; a classmethod is what its docs stack
    return before(classmethod(validator))


def renamed(data: Any, old: str, new: str) -> Any:
    """Raw params (a model's mode="before" input) with a renamed param's `old` key moved to `new`, so that
    grid files and stored params_json written before the rename still validate; both given is an error.
    Give the field `serialization_alias=old` too: run ids then hash the old name (runner.grid.identity)."""
    if not isinstance(data, dict) or old not in data:
        return data
    if new in data:
        raise ValueError(f"give {new!r} or its old name {old!r}, not both")
    return {(new if k == old else k): v for k, v in data.items()}
