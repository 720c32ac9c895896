"""Learner families. Each module is one task implementing `tasks.base.Task`."""

from tasks.base import FINAL_STATUSES, Result, RunContext, Task, TaskParams
from tasks.registry import UnknownTaskError, get_task, task_names

__all__ = [
    "FINAL_STATUSES",
    "Result",
    "RunContext",
    "Task",
    "TaskParams",
    "UnknownTaskError",
    "get_task",
    "task_names",
]
