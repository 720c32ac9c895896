"""Task registry: name -> where the task lives. Imported lazily so that listing names, or running
one task, never imports the others (a worker pays only for the task it runs)."""

from __future__ import annotations

import importlib
import os
from functools import cache

from tasks.base import Task

_TASKS: dict[str, str] = {
    "least_squares": "tasks.least_squares:LeastSquaresTask",
    "deep_linear": "tasks.deep_linear.task:DeepLinearTask",
    "linear_resnet": "tasks.linear_resnet.task:LinearResNetTask",
}


# Tasks outside this package: "name=module:Class,name2=module2:Class2". Read from the environment so
# that Ray workers, which inherit it, know the same tasks as the driver.
EXTRA_TASKS_ENV = "CONVGRID_EXTRA_TASKS"


def _all_tasks() -> dict[str, str]:
    extra = {}
    for entry in filter(None, os.environ.get(EXTRA_TASKS_ENV, "").split(",")):
        name, _, target = entry.partition("=")
        extra[name.strip()] = target.strip()
    return {**_TASKS, **extra}


class UnknownTaskError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown task {self.name!r}; valid choices: {', '.join(task_names())}"


def builtin_task_names() -> list[str]:
    """The tasks shipped with convgrid (the conformance suite's subjects)."""
    return sorted(_TASKS)


def task_names() -> list[str]:
    return sorted(_all_tasks())


@cache
def get_task(name: str) -> Task:
    try:
        target = _all_tasks()[name]
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
