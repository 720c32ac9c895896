"""Execution: where cells run (in process or on Ray actors), how their intermediate values reach the
driver, and what a finished run looks like on its way to the store. See runner.execute.base for the
Executor contract. Executors load on first use: importing this package imports neither torch nor ray.
"""

from __future__ import annotations

from tasks.lazy import lazy_exports

_EXPORTS = {
    "Executor": "runner.execute.base",
    "ReportChannel": "runner.execute.base",
    "ReportSpec": "runner.execute.base",
    "WorkItem": "runner.execute.base",
    "LocalExecutor": "runner.execute.local",
    "RayExecutor": "runner.execute.ray_pool",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("runner.execute", _EXPORTS)
