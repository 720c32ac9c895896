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

from tasks.lazy import lazy_exports

_EXPORTS = {
    "Cell": "runner.grid.cells",
    "ConfigError": "runner.errors",
    "ExecutionOptions": "runner.execute.options",
    "FlushPolicy": "runner.execute.options",
    "Grid": "runner.grid.cells",
    "LocalExecutor": "runner.execute.local",
    "RayExecutor": "runner.execute.ray_pool",
    "ResultStore": "runner.store",
    "RunReport": "runner.run.grid_run",
    "cells_from_store": "runner.run.rerun",
    "execute_cells": "runner.run.persist",
    "load_grid": "runner.grid.spec",
    "plan": "runner.run.plan",
    "run_grid": "runner.run.grid_run",
    "store_status": "runner.store.status",
    "tune": "runner.tune.driver",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("runner", _EXPORTS)
