"""Learner families: `tasks/<name>/task.py` defines one Task each (see tasks.base for the protocol).

Light on purpose: `import tasks.status` (the status vocabulary the store shares) must not pull in
pydantic models or torch, so the names below load on first use.
"""

from __future__ import annotations

from tasks.lazy import lazy_exports

_EXPORTS = {
    "Checkpoint": "tasks.base",
    "Result": "tasks.base",
    "RunContext": "tasks.base",
    "Task": "tasks.base",
    "TaskIdentity": "tasks.base",
    "TaskSpec": "tasks.base",
    "TaskParams": "tasks.base",
    "UnknownTaskError": "tasks.registry",
    "get_spec": "tasks.registry",
    "get_task": "tasks.registry",
    "task_names": "tasks.registry",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("tasks", _EXPORTS)
