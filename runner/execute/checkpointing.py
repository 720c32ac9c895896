"""A worker's side of checkpoints (issue 42): what a run resumes from, where its saves go, when it stops.

Before a run of a learner that declares checkpoints (tasks.base.Checkpointable) starts, its worker looks
under the results root (runner.store.checkpoints) for the run's own newest checkpoint (an earlier attempt
that died, was killed or preempted) and, where the learner's budget can grow, for the final state of a
run of the same config with a budget up to this one's; it resumes from whichever is further along. The
run's context saves on the target's cadence (`checkpoint_every`): by default every DEFAULT_EVERY_S
seconds, stretched so that saving costs at most MAX_OVERHEAD of the run's time, and the run's final
state where its budget can grow. A save that fails (a full disk, a root this node cannot reach) is
warned about once and the run goes on unsaved.

`PREEMPT` is this process's preemption: set on SIGTERM (a worker's own, `preempt_on_sigterm`, or the
driver's, passed on to its workers), it makes every running run save its state at its next step and
stop with status `preempted`, which the driver never stores; a run not yet started does not start.
"""

from __future__ import annotations

import inspect
import io
import os
import signal
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runner.execute.base import CheckpointTarget, WorkItem
from runner.fs.root import Root, open_root
from runner.grid.identity import canonical_params, lineage_key
from runner.store.checkpoints import CheckpointStore
from tasks.base import Checkpoint, RunContext, Task, is_checkpointable

PREEMPT = threading.Event()
DEFAULT_EVERY_S = 10.0
MAX_OVERHEAD = 0.01  # the default cadence's bound on the time spent saving, as a fraction of the run's
ABSENT_TTL_S = 5.0  # how long a task's checkpoint folder found absent is taken as absent (_may_hold)
_STORES: dict[str, CheckpointStore] = {}
_ABSENT: dict[tuple[int, str], float] = {}
_LOCK = threading.Lock()


class CheckpointWriteWarning(UserWarning):
    """A run's checkpoint could not be written; the run goes on without saving."""


@dataclass
class Resumed:
    """Where a run started: `step` (None: step 0), and `grown_from`, the run whose final state it grew."""

    step: int | None = None
    grown_from: str | None = None


def encode(ckpt: Checkpoint) -> bytes:
    """A checkpoint's bytes: `torch.save` of a dict of its step, tensors and plain data (no class)."""
    import torch

    buf = io.BytesIO()
    torch.save({"step": int(ckpt.step), "tensors": dict(ckpt.tensors), "state": dict(ckpt.state)}, buf)
    return buf.getvalue()


def decode(data: bytes, step: int) -> Checkpoint:
    """The checkpoint in `data` (its checksum checked by the store), loaded without running code
    (`weights_only`); ValueError where it is not a checkpoint of `step`."""
    import torch

    try:
        raw = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - whatever a safe load refuses is a damaged or planted file
        raise ValueError(f"not a checkpoint torch loads safely: {type(exc).__name__}: {str(exc)[:200]}") from exc
    if not isinstance(raw, dict) or set(raw) != {"step", "tensors", "state"}:
        raise ValueError("not a checkpoint's dict (step, tensors, state)")
    tensors, state = raw["tensors"], raw["state"]
    if raw["step"] != step or not isinstance(tensors, dict) or not isinstance(state, dict):
        raise ValueError(f"holds step {raw['step']!r}, its name says {step}")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in tensors.items()):
        raise ValueError("its tensors are not tensors by name")
    return Checkpoint(step=step, tensors=tensors, state=state)


def _store(root: str) -> CheckpointStore:
    with _LOCK:
        if root not in _STORES:
            _STORES[root] = CheckpointStore(Root(*open_root(root)))
        return _STORES[root]


def run_context(item: WorkItem, task: Task, params: Any, **base: Any) -> tuple[RunContext, Resumed]:
    """The context of one run (`base`: device, threads, deadline, reporter), with its checkpoints where
    its item has a target and its learner declares them; and where it resumes from."""
    target = item.checkpoints
    if target is None or not is_checkpointable(task):
        return RunContext(**base), Resumed()
    store = _store(target.root)
    budget_name = task.growable_budget(params)
    lineage, budget = None, None
    if budget_name is not None:
        budget = int(getattr(params, budget_name))
        lineage = lineage_key(task, canonical_params(task, params), budget_name)
    resume, resumed = _resume_point(store, item, lineage, budget)
    every = target.every_s if target.every_s is not None else DEFAULT_EVERY_S
    ctx = RunContext(**base, resume=resume, checkpoint_every=every, preempt=PREEMPT, keep_final=lineage is not None)
    ctx.checkpointer = _saver(store, item, ctx, target, lineage, budget)
    return ctx, resumed


def _resume_point(
    store: CheckpointStore, item: WorkItem, lineage: str | None, budget: int | None
) -> tuple[Checkpoint | None, Resumed]:
    if not _may_hold(store, item.task):
        return None, Resumed()
    try:
        own = store.latest(item.task, item.run_id, decode)
        grown = None
        if lineage is not None and budget is not None:
            grown = store.grow_source(item.task, lineage, budget, decode)
    except OSError as exc:
        warnings.warn(f"convgrid: run {item.run_id} starts from step 0: {exc}", CheckpointWriteWarning, stacklevel=3)
        return None, Resumed()
    if grown is not None and (own is None or grown[0].step > own.step):
        ckpt, source = grown
        return ckpt, Resumed(ckpt.step, None if source == item.run_id else source)
    return own, Resumed(own.step if own is not None else None)


def _may_hold(store: CheckpointStore, task: str) -> bool:
    """Whether the task's checkpoint folder may hold anything: one look per task every ABSENT_TTL_S while
    it is absent, so a grid of many short runs that never saved pays no look-up per run (on an object store,
    a request each). A checkpoint first saved within that window is missed (its run starts from step 0)."""
    now = time.monotonic()
    with _LOCK:
        seen = _ABSENT.get((id(store), task))
    if seen is not None and now - seen < ABSENT_TTL_S:
        return False
    try:
        held = store.holds(task)
    except OSError:
        return True  # the look-up itself will say why
    with _LOCK:
        if held:
            _ABSENT.pop((id(store), task), None)
        else:
            _ABSENT[(id(store), task)] = now
    return held


def _saver(
    store: CheckpointStore,
    item: WorkItem,
    ctx: RunContext,
    target: CheckpointTarget,
    lineage: str | None,
    budget: int | None,
) -> Callable[[Checkpoint], None]:
    started = time.monotonic()

    def save(ckpt: Checkpoint) -> None:
        t0 = time.monotonic()
        final = lineage is not None and ckpt.final  # the state its budget ended at: runs may grow it
        if final and t0 - started < target.keep_final_s:
            return  # a run this short is cheaper to run again than to keep (a file per run of a big grid)
        try:
            if final:
                assert lineage is not None and budget is not None
                store.save_final(item.task, lineage, item.run_id, budget, ckpt.step, encode(ckpt))
            else:
                store.save(item.task, item.run_id, ckpt.step, encode(ckpt))
        except (OSError, ValueError) as exc:
            warnings.warn(
                f"convgrid: run {item.run_id} goes on without checkpoints: {exc}", CheckpointWriteWarning, stacklevel=2
            )
            ctx.checkpointer = None  # the learner asks again at its next step: it then costs nothing
            return
        with _LOCK:
            _ABSENT.pop((id(store), item.task), None)  # it holds something now
        if target.every_s is None:  # the default cadence: never more than MAX_OVERHEAD of the run saving
            ctx.checkpoint_every = max(DEFAULT_EVERY_S, (time.monotonic() - t0) / MAX_OVERHEAD)

    return save


def preempt_on_sigterm(grace_s: float, idle: Callable[[], bool]) -> bool:
    """In a worker process: SIGTERM sets PREEMPT (running runs save and stop, queued ones do not start),
    and the process exits 143 once `idle()` or after `grace_s` seconds. False where this thread cannot
    install a handler (not the main thread)."""

    def handler(signum: int, _frame: object) -> None:
        PREEMPT.set()

        def leave() -> None:
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and not idle():
                time.sleep(0.05)
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))  # the last records on their way out
            os._exit(128 + signum)

        threading.Thread(target=leave, name="convgrid-preempted", daemon=True).start()

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:
        return False
    return True


# --- the driver's side: SIGTERM while runs execute preempts them (runner.cli installs the handler) ---

# pass a preemption on (a Ray pool tells its actors); held weakly where a listener is a bound method, so that
# a pool its caller dropped without closing it is not kept alive here, nor its actors with it
_listeners: list[Callable[[], Callable[[], None] | None]] = []
_armed: list[float] = []  # the grace periods of the `preemptible` sections now open (innermost last)
_settled = threading.Event()  # the section closed: the runs in flight came back
# A SIGTERM this soon after the one that began the preemption is the same stop delivered twice, not a
# second one: SLURM's job kill (scancel, `scontrol requeue`, a preemption, the time limit) signals every
# process of the job, so the driver gets it from slurmd and again from the job's script, which passes
# the SIGTERM it gets on to the driver (it must: `--signal=B:TERM@S` signals the script alone).
REPEAT_S = 2.0
_began: list[float] = []  # when this process's preemption began


def on_preempt(listener: Callable[[], None]) -> Callable[[], None]:
    """Call `listener` (from a thread, not the signal handler) when this process is preempted; returns a
    function that removes it."""
    ref: Callable[[], Callable[[], None] | None] = (
        weakref.WeakMethod(listener) if inspect.ismethod(listener) else (lambda: listener)
    )
    _listeners.append(ref)
    return lambda: _listeners.remove(ref) if ref in _listeners else None


class preemptible:  # noqa: N801 - a context manager read as a phrase: `with preemptible(30):`
    """While open (runs execute), SIGTERM preempts instead of stopping at once: `begin_preemption`."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s

    def __enter__(self) -> None:
        _armed.append(self.grace_s)
        _settled.clear()

    def __exit__(self, *exc: object) -> None:
        _armed.pop()
        if not _armed:
            _settled.set()


def begin_preemption(then: Callable[[], None]) -> bool:
    """Preempt this process's runs: set PREEMPT, tell the listeners, and call `then` (which stops the
    process) once the grace period passed with runs still in flight. False where no runs execute now,
    or on a second SIGTERM more than REPEAT_S seconds after the first (the caller stops at once); True,
    doing nothing more, on one sooner (the same stop delivered twice)."""
    if PREEMPT.is_set() and _began and time.monotonic() - _began[-1] < REPEAT_S:
        return True  # the same SIGTERM again (REPEAT_S): the preemption under way goes on
    if not _armed or PREEMPT.is_set():
        return False
    grace = _armed[-1]
    _began.append(time.monotonic())
    PREEMPT.set()

    def wait() -> None:
        for ref in list(_listeners):
            listener = ref()
            if listener is None:  # its pool is gone
                continue
            try:
                listener()
            except Exception as exc:  # noqa: BLE001 - a worker gone already: its runs resume next time anyway
                warnings.warn(f"convgrid: a preemption was not passed on: {exc}", stacklevel=1)
        if not _settled.wait(grace):
            _began.clear()  # the SIGTERM `then` sends itself at the grace's end is no repeat: it stops
            then()

    threading.Thread(target=wait, name="convgrid-preempt", daemon=True).start()
    return True


def preempted() -> bool:
    """Whether this process was preempted (its runs saved their state and stopped, or never started)."""
    return PREEMPT.is_set()
