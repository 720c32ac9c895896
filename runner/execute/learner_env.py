"""Learners outside the package, shipped to Ray workers on every node.

A learner named in CONVGRID_LEARNERS (runner.settings, tasks.registry) must be importable where its runs execute.
On the embedded Ray the workers inherit this process's environment and paths. On a cluster joined by
address they do not, so the job's runtime environment carries both: the variable itself, and the
learner's top-level package as a `py_modules` entry, which Ray uploads once and puts on the path of
every worker on every node.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from runner.settings import env_name, settings
from tasks.registry import external_learners


def runtime_env() -> dict[str, Any] | None:
    """The runtime_env that lets workers on other nodes find this driver's external learners."""
    learners = external_learners()
    if not learners:
        return None
    modules = []
    for package in sorted(set(learners.values())):
        top = package.split(".")[0]
        spec = importlib.util.find_spec(top)
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError(f"{env_name('learners')}: package {top!r} is not importable from this driver")
        modules.append(list(spec.submodule_search_locations)[0])
    return {"env_vars": {env_name("learners"): settings().learners}, "py_modules": sorted(set(modules))}
