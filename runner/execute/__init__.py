"""Execution: where cells run (in process or on Ray actors), how their intermediate values reach the
driver, and what a finished run looks like on its way to the store. See runner.execute.base for the
Executor contract. Executors load on first use: importing this package imports neither torch nor ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Executor": "runner.execute.base",
    "ReportChannel": "runner.execute.base",
    "ReportSpec": "runner.execute.base",
    "WorkItem": "runner.execute.base",
    "LocalExecutor": "runner.execute.local",
    "RayExecutor": "runner.execute.ray_pool",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'runner.execute' has no attribute {name!r}")
