"""convgrid's runner: grid files -> configs -> execution -> Parquet store; the CLI.

Layers (docs/architecture.md), top down: cli -> tune -> run -> execute -> grid -> store -> coord -> fs;
settings and errors are leaves every layer may import.

Notebook API:
    from runner import run_grid, load_grid, ResultStore, ExecutionOptions
    report = run_grid("grids/deep_linear/demo_depth.yaml", results="results", options=ExecutionOptions(executor="ray"))

Names load on first use, so `import runner.store` (or a Ray worker importing runner.execute.worker)
pays only for what it uses.
"""

from __future__ import annotations

from tasks.lazy import by_module, lazy_exports

_EXPORTS = by_module(
    {
        "runner.errors": ("ConfigError",),
        "runner.execute.local": ("LocalExecutor",),
        "runner.execute.options": ("ExecutionOptions", "FlushPolicy"),
        "runner.execute.ray_pool": ("RayExecutor",),
        "runner.grid.cells": ("Cell", "Grid"),
        "runner.grid.spec": ("load_grid",),
        "runner.run.grid_run": ("RunReport", "run_grid"),
        "runner.run.persist": ("execute_cells",),
        "runner.run.plan": ("plan",),
        "runner.run.rerun": ("cells_from_store",),
        "runner.store": ("ResultStore",),
        "runner.store.status": ("store_status",),
        "runner.tune.driver": ("tune",),
    }
)
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("runner", _EXPORTS)
