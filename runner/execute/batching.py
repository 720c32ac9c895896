"""Which cells of a chunk run together as one batched computation (tasks.base.BatchableTask).

Consecutive items of one task with equal, non-None `batch_key` form a batch, capped by a member count
(`max_size`) and a memory budget (the sum of the members' `batch_bytes`). Everything else (a task
without the batch methods, a key of None, a config that does not even validate) is a batch of one and
runs through the task's plain `run`. Imports the tasks (and so torch): worker side, or a driver that
orders its queue by key.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from runner.execute.base import BatchPolicy, WorkItem
from runner.grid.identity import validate_params
from tasks.base import BatchableTask
from tasks.registry import get_task

CPU_BUDGET_BYTES = 512 * 2**20  # members' working sets summed; far above the small learners' needs, far below RAM
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


def batch_key(item: WorkItem) -> tuple[str, Hashable] | None:
    """(task, key) of an item that may share a batch, or None when it runs alone."""
    member = _member(item)
    return None if member is None else (item.task, member[1])


def _member(item: WorkItem) -> tuple[BatchableTask, Hashable, Any] | None:
    try:
        task = get_task(item.task)
        if not isinstance(task, BatchableTask):
            return None
        params = validate_params(task, item.params)
        key = task.batch_key(params)
    except Exception:  # noqa: BLE001 - a cell that cannot even be keyed runs alone, where its error is recorded
        return None
    return None if key is None else (task, key, params)


def order_by_key(items: Iterable[WorkItem]) -> list[tuple[WorkItem, Any]]:
    """Items regrouped so that equal batch keys are adjacent (stable: a key's first appearance decides
    its place), each with its key (None: runs alone), so that chunks can be cut to hold whole batches."""
    groups: dict[Any, list[tuple[WorkItem, Any]]] = {}
    for n, item in enumerate(items):
        key = batch_key(item)
        groups.setdefault(("single", n) if key is None else key, []).append((item, key))
    return [pair for group in groups.values() for pair in group]


def plan_groups(items: Sequence[WorkItem], policy: BatchPolicy, device: str) -> Iterator[Group]:
    """Cut `items` into groups, in order: batches of consecutive equal keys within the policy's caps."""
    if not policy.enabled:
        for item in items:
            yield Group([item])
        return
    budget = policy.budget_bytes if policy.budget_bytes is not None else default_budget(device)
    current: list[tuple[WorkItem, Any]] = []
    current_key: Any = None
    used = 0
    batch_task: BatchableTask | None = None

    def flush() -> Iterator[Group]:
        if len(current) == 1:
            yield Group([current[0][0]])
        elif current:
            yield Group([i for i, _ in current], batch_task, tuple(p for _, p in current))
        current.clear()

    for item in items:
        member = _member(item)
        if member is None:
            yield from flush()
            yield Group([item])
            continue
        task, key, params = member
        size = max(0, int(task.batch_bytes(params)))
        fits = len(current) < policy.max_size and used + size <= budget
        if not current or (item.task, key) != current_key or not fits:
            yield from flush()
            current_key, used, batch_task = (item.task, key), 0, task
        current.append((item, params))
        used += size
    yield from flush()
