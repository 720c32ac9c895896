"""Learner families: `tasks/<name>/task.py` defines one Task each (see tasks.base for the protocol).

Light on purpose: `import tasks.status` (the status vocabulary the store shares) must not pull in
pydantic models or torch, so the names below load on first use.
"""

from __future__ import annotations

from tasks.lazy import by_module, lazy_exports

_EXPORTS = by_module(
    {
        "tasks.base": ("Checkpoint", "Result", "RunContext", "Task", "TaskIdentity", "TaskSpec", "TaskParams"),
        "tasks.registry": ("UnknownTaskError", "get_spec", "get_task", "task_names"),
    }
)
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("tasks", _EXPORTS)
