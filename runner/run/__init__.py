"""Running a grid: what is left to run (`plan`), running it and persisting what comes back (`persist`),
who asked for which run (`members`), the whole command (`grid_run.run_grid`), and reruns of stored
runs (`rerun`). Semantics are the command line's: work already in the store (ok or diverged) is
skipped, failed and timed-out runs only run again with retry_failed, pruned runs always run again.

    from runner.run import run_grid
    report = run_grid("grids/deep_linear/demo_depth.yaml", results="results")
"""

from __future__ import annotations

from tasks.lazy import by_module, lazy_exports

_EXPORTS = by_module(
    {
        "runner.run.grid_run": ("RunReport", "run_grid"),
        "runner.run.persist": ("execute_cells",),
        "runner.run.plan": ("plan", "plan_grid"),
        "runner.run.rerun": ("cells_from_store",),
    }
)
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("runner.run", _EXPORTS)
