"""Task registry: a learner is found by name, never listed by hand.

Built-in learners are the folders `tasks/<name>/` that hold a `task.py` defining `TASK` (the Task
class). Learners outside this package are named in the environment variable `CONVGRID_LEARNERS` as
`name=package` pairs, comma-separated; `package.task` defines `TASK` the same way (and, optionally,
`package.figures` / `package.claims` what analysis/<name>/ holds for a built-in one). The environment
reaches Ray workers (the executor forwards it), so one mechanism serves driver and workers alike.
Imports are lazy: listing names, or running one task, never imports the others. Planning imports
less still: `get_spec` takes a learner's name, version and Params from its `params` module (`SPEC`),
which needs pydantic only, so the driver validates and counts a grid without torch.
"""

from __future__ import annotations

import importlib
import os
from functools import cache, lru_cache
from pathlib import Path

from tasks.base import Task, TaskIdentity, TaskSpec

# The learners' own variable, read here and not through runner.settings: learners import nothing of the
# runner. runner.settings still declares it (its `learners` field: `convgrid --help` lists it, and a
# malformed value is refused at start with the same parse_learners).
LEARNERS_VARIABLE = "CONVGRID_LEARNERS"

_HERE = Path(__file__).resolve().parent


def builtin_task_names() -> list[str]:
    """The tasks shipped with convgrid (the conformance suite's subjects)."""
    return list(_builtin_names())


@cache
def _builtin_names() -> tuple[str, ...]:
    # Looked up for every cell a worker runs or batches: one scan of the package folder per process (its
    # folders do not change while it runs), not a directory listing and a stat per learner each time.
    return tuple(sorted(d.name for d in _HERE.iterdir() if (d / "task.py").is_file()))


def parse_learners(value: str) -> dict[str, str]:
    """`name=package[,name=package...]` -> {name: package}; ValueError naming an entry of another form."""
    found = {}
    for entry in filter(None, (e.strip() for e in value.split(","))):
        name, sep, package = entry.partition("=")
        if not sep or not name.strip() or not package.strip():
            raise ValueError(f"entry {entry!r} is not of the form name=package")
        found[name.strip()] = package.strip()
    return found


def external_learners() -> dict[str, str]:
    """name -> package of the learners named in CONVGRID_LEARNERS."""
    return dict(_parsed(os.environ.get(LEARNERS_VARIABLE, "")))


@lru_cache(maxsize=8)
def _parsed(value: str) -> dict[str, str]:
    # asked for every cell a worker runs; the value rarely changes within a process
    return parse_learners(value)


def learner_package(name: str) -> str:
    """The package that holds learner `name`'s `task` module."""
    external = external_learners()
    if name in external:
        return external[name]
    if name in _builtin_names():
        return f"tasks.{name}"
    raise UnknownTaskError(name)


class UnknownTaskError(KeyError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown task {self.name!r}; valid choices: {', '.join(task_names())}"


def task_names() -> list[str]:
    return sorted({*builtin_task_names(), *external_learners()})


@cache
def _load(name: str, package: str) -> Task:
    module = importlib.import_module(f"{package}.task")
    task: Task = module.TASK()
    if task.name != name:
        raise ValueError(f"{package}.task.TASK is named {task.name!r}, registered as {name!r}")
    return task


def get_task(name: str) -> Task:
    return _load(name, learner_package(name))


def get_spec(name: str) -> TaskIdentity:
    """The learner's name, version and Params, from `<package>.params.SPEC` when it defines one (no
    numerical code imported), else from the full Task (a learner outside this package may have no
    light params module)."""
    return _load_spec(name, learner_package(name))


@cache
def _load_spec(name: str, package: str) -> TaskIdentity:
    try:
        module = importlib.import_module(f"{package}.params")
    except ModuleNotFoundError as exc:
        if exc.name != f"{package}.params":
            raise  # the params module exists but imports something missing: that is the learner's bug
        return _load(name, package)
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, TaskSpec):
        return _load(name, package)
    if spec.name != name:
        raise ValueError(f"{package}.params.SPEC is named {spec.name!r}, registered as {name!r}")
    return spec
