"""Which cells of a chunk run together as one batched computation (tasks.base.BatchableTask).

Items of one chunk with the same task and equal, non-None `batch_key` form a batch, capped by a member
count (`max_size`) and a memory budget (the sum of the members' `batch_bytes`). Everything else (a task
without the batch methods, a key of None, a config that does not even validate) is a batch of one and
runs through the task's plain `run`. Imports the tasks (and so torch): worker side, or a driver that
cuts chunks to hold whole batches.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from runner.execute.base import BatchPolicy, WorkItem
from runner.grid.identity import validate_params
from tasks.base import BatchableTask, is_batchable
from tasks.registry import get_task

# Members' working sets summed, on the CPU: what a batch may take before it stops paying. A batch saves
# the per-operation costs of small products (deep_linear at width 16: GD 63 ms a member alone, 8.9 at 64
# members), but once the members' data outgrow the caches every product streams it from memory, and a
# batch of large members is slower than the members alone (least_squares d_in 200, 0.9 MB a member: 27 ms
# alone, 23 at 4 members, 41 at 64). Measured on the project's 2-core AMD EPYC (1 MB of L2 a core, 32 MB
# of L3), CPU time per member by batch size (docs/architecture.md, "Batch budget on the CPU"): 8 MiB
# keeps every measured case within 20 % of its best size and none slower than alone.
CPU_BUDGET_BYTES = 8 * 2**20
GPU_FREE_FRACTION = 0.5  # of the memory free on the device when the batch is planned (the rest: allocator slack)


@dataclass(frozen=True)
class Group:
    """Items that run as one call: `task` and `params` are set only for a real batch (two or more)."""

    items: list[WorkItem]
    task: BatchableTask | None = None
    params: tuple[Any, ...] = ()


def default_budget(device: str) -> int:
    """Bytes a batch may use on `device`: a fraction of the free memory on CUDA (which already counts
    this actor's cap when it holds a GPU fraction), a fixed budget on the CPU."""
    if device.startswith("cuda"):
        import torch

        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free * GPU_FREE_FRACTION)
    return CPU_BUDGET_BYTES


# What batching knows of an item that may share a batch: its task, its batch key and its validated params.
Member = tuple[BatchableTask, Hashable, Any]


def batch_key(item: WorkItem) -> tuple[str, Hashable] | None:
    """(task, key) of an item that may share a batch, or None when it runs alone."""
    member = batch_member(item)
    return None if member is None else (item.task, member[1])


def batch_member(item: WorkItem, tasks: dict[str, Any] | None = None) -> Member | None:
    """The item's task, batch key and params, or None when it runs alone. `tasks` (name -> task or the
    error loading it) spares a caller that keys many items a registry look-up per item."""
    try:
        if tasks is None:
            task = get_task(item.task)
        else:
            if item.task not in tasks:
                try:
                    tasks[item.task] = get_task(item.task)
                except Exception as exc:  # noqa: BLE001 - kept, so that every item of this task runs alone
                    tasks[item.task] = exc
            task = tasks[item.task]
        if not is_batchable(task):
            return None
        params = validate_params(task, item.params)
        key = task.batch_key(params)
    except Exception:  # noqa: BLE001 - a cell that cannot even be keyed runs alone, where its error is recorded
        return None
    return None if key is None else (task, key, params)


def plan_groups(
    items: Sequence[WorkItem], policy: BatchPolicy, device: str, members: Sequence[Member | None] | None = None
) -> Iterator[Group]:
    """Cut a chunk into groups: items of one task with equal keys form batches (in the order of their
    key's first appearance, wherever in the chunk they are), within the policy's caps; the rest, and
    everything when batching is off, run alone in their order. `members`: the items' `batch_member`s,
    where the caller has them already (the in-process executor keyed them to cut the chunk)."""
    if not policy.enabled:
        for item in items:
            yield Group([item])
        return
    budget = policy.budget_bytes if policy.budget_bytes is not None else default_budget(device)
    buckets: dict[Any, list[tuple[WorkItem, Member | None]]] = {}
    tasks: dict[str, Any] = {}
    for n, item in enumerate(items):
        member = members[n] if members is not None else batch_member(item, tasks)
        buckets.setdefault(("alone", n) if member is None else (item.task, member[1]), []).append((item, member))
    for bucket in buckets.values():
        batch: list[tuple[WorkItem, Any]] = []
        used = 0
        for item, member in bucket:
            if member is None:
                yield Group([item])
                continue
            task, _key, params = member
            size = max(0, int(task.batch_bytes(params)))
            if batch and (len(batch) >= policy.max_size or used + size > budget):
                yield _group(batch, task)
                batch, used = [], 0
            batch.append((item, params))
            used += size
        if batch:
            yield _group(batch, task)


def _group(batch: list[tuple[WorkItem, Any]], task: BatchableTask) -> Group:
    if len(batch) == 1:
        return Group([batch[0][0]])
    return Group([i for i, _ in batch], task, tuple(p for _, p in batch))
