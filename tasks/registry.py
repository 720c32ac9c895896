"""Task registry: name -> where the task lives. Imported lazily so that listing names, or running
one task, never imports the others (a worker pays only for the task it runs)."""

from __future__ import annotations

import importlib
from functools import cache

from tasks.base import Task

_TASKS: dict[str, str] = {
    "least_squares": "tasks.least_squares:LeastSquaresTask",
    "deep_linear": "tasks.deep_linear.task:DeepLinearTask",
    "linear_resnet": "tasks.linear_resnet.task:LinearResNetTask",
}


class UnknownTaskError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown task {self.name!r}; valid choices: {', '.join(task_names())}"


def task_names() -> list[str]:
    return sorted(_TASKS)


@cache
def get_task(name: str) -> Task:
    try:
        target = _TASKS[name]
    except KeyError:
        raise UnknownTaskError(name) from None
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(module_name), attr)()


def register(name: str, target: str) -> None:
    """Add a task defined outside this package ("module:ClassName"); the module must be importable
    on every worker."""
    _TASKS[name] = target
    get_task.cache_clear()


def unregister(name: str) -> None:
    _TASKS.pop(name, None)
    get_task.cache_clear()
