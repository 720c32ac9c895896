"""Which runs of a plan start from a stored state instead of step 0 (issue 42), for `run --dry-run`: a run
whose config equals a stored run's but for a larger budget grows that run's final state
(runner.store.checkpoints); a run with checkpoints of its own (an attempt that was killed or preempted)
resumes from its newest one. Read from the checkpoints' file names alone: nothing is loaded."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from runner.grid.cells import Cell
from runner.grid.identity import canonical_params, lineage_key, validate_params
from runner.store import ResultStore
from runner.store.checkpoints import CHECKPOINTS_DIR, FINAL_SUB, CheckpointStore


@dataclass
class Growth:
    """Runs that would extend a stored run (and the steps that saves), runs that would resume their own."""

    grown: int = 0
    grown_steps: int = 0
    resumed: int = 0
    resumed_steps: int = 0

    def line(self) -> str:
        return (
            f"  extend stored runs: {self.grown} (saving {self.grown_steps:,} steps)   "
            f"resume their own checkpoints: {self.resumed} (saving {self.resumed_steps:,} steps)"
        )


def plan_growth(store: ResultStore, cells: Iterable[Cell]) -> Growth:
    """Where each of `cells` would start, from the checkpoints under the store's root."""
    from tasks import get_task
    from tasks.base import is_checkpointable

    checkpoints = CheckpointStore(store.files)
    out = Growth()
    has: dict[tuple[str, str], bool] = {}
    own: dict[str, set[str]] = {}
    for cell in cells:
        sub = (cell.task, FINAL_SUB)
        if sub not in has:  # one look per task: a store without checkpoints costs nothing per cell
            has[sub] = store.files.exists(f"{CHECKPOINTS_DIR}/{cell.task}/{FINAL_SUB}")
            own[cell.task] = set(checkpoints.uncommitted_runs(cell.task))
        step = 0
        if cell.run_id in own[cell.task]:
            step = max(checkpoints.steps(cell.task, cell.run_id), default=0)
        grown = 0
        if has[sub]:
            task = get_task(cell.task)
            params = validate_params(task, cell.params_json())
            budget = task.growable_budget(params) if is_checkpointable(task) else None
            if budget is not None:
                lineage = lineage_key(task, canonical_params(task, params), budget)
                limit = int(getattr(params, budget))
                finals = checkpoints.finals(cell.task, lineage)
                grown = max((step for stored, step, _, _ in finals if stored <= limit), default=0)
        if grown > step:
            out.grown, out.grown_steps = out.grown + 1, out.grown_steps + grown
        elif step:
            out.resumed, out.resumed_steps = out.resumed + 1, out.resumed_steps + step
    return out
