"""Running cells: the code both executors share, in the driver (local) or inside a Ray actor.

A cell never raises out of here: an exception inside a task becomes a `failed` record with the full
traceback, so one bad config cannot take a chunk (or an actor) down with it.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from runner.execute import provenance, run_output
from runner.execute.base import BatchPolicy, Reporter, ReporterFactory, WorkItem
from runner.execute.batching import Group, Member, plan_groups
from runner.execute.checkpointing import PREEMPT, Resumed, run_context
from runner.grid.identity import validate_params
from runner.grid.schema import stored_curve
from runner.store.records import RunRecord
from tasks.base import Result, device_for
from tasks.registry import get_task
from tasks.status import FAILED, PREEMPTED, TIMEOUT


def configure_threads(threads: int) -> None:
    """Pin torch (and the BLAS it calls) to `threads`: on a small machine, one actor per core with one
    thread each beats oversubscription by a wide margin."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["MKL_NUM_THREADS"] = str(threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    set_torch_threads(threads)


def set_torch_threads(threads: int) -> None:
    """torch's thread count for the calling thread (OpenMP's count is a thread's own): what each thread of
    the in-process executor calls before its first run. The environment is left alone there: setenv
    beside a getenv in another thread is not safe in C."""
    import torch  # here, not at module level: a driver that only plans or reads never pays for it

    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def claim_device(device: str, gpu_fraction: float | None = None) -> str:
    """The device a worker process computes on: `device`, or "cpu" where Ray counted a GPU that torch
    cannot see (a simulated GPU node). A fractional share caps this process's CUDA allocations, since
    Ray's fractional GPUs are bookkeeping only."""
    if not device.startswith("cuda"):
        return device
    import torch

    if not torch.cuda.is_available():
        return "cpu"
    if gpu_fraction is not None and gpu_fraction < 1:
        torch.cuda.set_per_process_memory_fraction(gpu_fraction)
    return device


def _version(name: str) -> str:
    try:
        return get_task(name).version
    except Exception:  # noqa: BLE001 - a worker that cannot load the task records that as the run's failure
        return "unknown"


def _record(
    item: WorkItem,
    result: Result,
    started: datetime,
    wall: float,
    device: str,
    version: str | None = None,
    resumed: Resumed | None = None,
) -> RunRecord:
    """The run's record; `version`: its task's, where the caller holds the task (else looked up);
    `resumed`: the step it resumed from and the run it grew, where it did."""
    gpu_name, gpu_memory_gb = provenance.gpu(device)
    row: dict[str, Any] = {
        "run_id": item.run_id,
        "task": item.task,
        "version": version if version is not None else _version(item.task),
        "status": result.status,
        "error": result.error,
        "params_json": _json(item.params),
        "wall_s": wall,
        "flops": float(result.flops),
        "n_steps": int(result.n_steps),
        "diverged_step": result.diverged_step,
        "started": started,
        "finished": datetime.now(UTC),
        "host": provenance.host(),
        "device": device,
        "gpu_name": gpu_name,
        "gpu_memory_gb": gpu_memory_gb,
        "code_version": provenance.code_version(),
        "packages": provenance.packages(),
        "resumed_from": resumed.step if resumed is not None else None,
        "grown_from": resumed.grown_from if resumed is not None else None,
    }
    row.update(item.params)
    row.update(result.summary)
    return RunRecord(item.run_id, item.task, row, stored_curve(item.task, result.curve))


def _json(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def run_item(
    item: WorkItem,
    *,
    device: str = "cpu",
    threads: int = 1,
    timeout_s: float | None = None,
    reporter: Reporter | None = None,
) -> RunRecord:
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    deadline = time.time() + timeout_s if timeout_s else None
    used, version, resumed = device, "unknown", Resumed()
    with run_output.capture([item.run_id]) as out:
        try:
            task = get_task(item.task)
            used, version = device_for(task, device), task.version
            params = validate_params(task, item.params)
            ctx, resumed = run_context(
                item, task, params, device=used, threads=threads, deadline=deadline, reporter=reporter
            )
            result = task.run(params, ctx)
            result.validate(task)
        except Exception as exc:  # noqa: BLE001 - a task's bug is a recorded failure, not a crash
            result = Result(status=FAILED, error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    wall = time.perf_counter() - t0
    record = _record(item, _explained(result, timeout_s, wall), started, wall, used, version, resumed)
    record.log = out.text()
    return record


def preempted_record(item: WorkItem) -> RunRecord:
    """The record of a run that did not start because its worker is being preempted (never stored)."""
    now = datetime.now(UTC)
    return _record(item, Result(status=PREEMPTED), now, 0.0, "cpu")  # type: ignore[arg-type]  # never stored


def _explained(result: Result, timeout_s: float | None, wall_s: float) -> Result:
    """A run stopped at its deadline, with the reason `convgrid status` lists (the task says only
    "timeout")."""
    if result.status != TIMEOUT or result.error:
        return result
    limit = f"its {timeout_s:g} s deadline" if timeout_s else "its deadline"
    return replace(result, error=f"timeout: stopped at {limit} after {wall_s:.2f} s, at step {result.n_steps}")


def run_items(
    items: Sequence[WorkItem],
    *,
    device: str = "cpu",
    threads: int = 1,
    timeout_s: float | None = None,
    reporters: ReporterFactory | None = None,
    policy: BatchPolicy | None = None,
    on_start: Callable[[Sequence[WorkItem]], None] | None = None,
    members: Sequence[Member | None] | None = None,
) -> Iterator[RunRecord]:
    """Run a chunk, yielding each record as its run (or its batch) finishes: items of one task with
    equal batch keys run as one `run_batch` call (see runner.execute.batching), the rest one by one.
    `on_start(group_items)` is told what is about to run (the actor's hard-timeout bookkeeping);
    `members`: the items' batch members where the caller keyed them already (the local executor)."""
    for group in plan_groups(items, policy or BatchPolicy(), device, members):
        if PREEMPT.is_set():  # this worker is being preempted: what has not started waits for the next attempt
            yield from (preempted_record(item) for item in group.items)
            continue
        if on_start is not None:
            on_start(group.items)
        if group.task is None:
            item = group.items[0]
            reporter = reporters(item) if reporters else None
            yield run_item(item, device=device, threads=threads, timeout_s=timeout_s, reporter=reporter)
        else:
            yield from _run_batch(group, device, threads, timeout_s, reporters)


def _run_batch(
    group: Group, device: str, threads: int, timeout_s: float | None, reporters: ReporterFactory | None
) -> Iterator[RunRecord]:
    """One `run_batch` call. Each member gets its own context: its own reporter (a pruner stops it
    alone) and a deadline counted from the batch's start. Its record's wall_s is its share of the
    batch's wall time (the batch's seconds over its member count), so that summed wall_s stays the
    compute spent and the chunk sizer's per-run estimate stays right.

    If the batched call raises (or breaks the protocol), its members run again one by one: the single
    run is the reference the batched path must equal, so each member gets exactly the record it would
    have had alone (a bad member fails alone instead of failing its batch mates)."""
    assert group.task is not None
    used = device_for(group.task, device)
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    deadline = time.time() + timeout_s if timeout_s else None
    try:
        with run_output.capture([i.run_id for i in group.items]) as out:
            ctxs, resumed = zip(
                *(
                    run_context(
                        item,
                        group.task,
                        p,
                        device=used,
                        threads=threads,
                        deadline=deadline,
                        reporter=reporters(item) if reporters else None,
                    )
                    for item, p in zip(group.items, group.params, strict=True)
                ),
                strict=True,
            )
            results = group.task.run_batch(list(group.params), list(ctxs))
        if len(results) != len(group.items):
            raise ValueError(f"run_batch returned {len(results)} results for {len(group.items)} configs")
        for result in results:
            result.validate(group.task)
    except Exception:  # noqa: BLE001 - the members are run alone instead, where a task's bug is a recorded failure
        for item in group.items:
            reporter = reporters(item) if reporters else None
            yield run_item(item, device=device, threads=threads, timeout_s=timeout_s, reporter=reporter)
        return
    wall = time.perf_counter() - t0
    share = wall / len(group.items)
    # a batched call's output cannot be told apart by member: each member keeps all of it
    log = _batch_log(out.text(), len(group.items))
    for item, result, r in zip(group.items, results, resumed, strict=True):
        record = _record(item, _explained(result, timeout_s, wall), started, share, used, group.task.version, r)
        record.log = log
        yield record


def _batch_log(text: str, members: int) -> str:
    if not text:
        return ""
    return f"[convgrid: the output of one batched call of {members} runs, this one among them]\n{text}"


def timeout_record(item: WorkItem, elapsed_s: float, limit_s: float, device: str = "cpu") -> RunRecord:
    """The record of a run whose worker was killed because it ignored its deadline."""
    started = datetime.now(UTC) - timedelta(seconds=elapsed_s)
    message = (
        f"hard timeout: the run ignored its {limit_s:g}s deadline and its worker was killed after {elapsed_s:.1f}s"
    )
    return _record(item, Result(status=TIMEOUT, error=message), started, elapsed_s, device)
