"""convgrid's runner: grid files -> configs -> execution -> Parquet store; the CLI.

Layers (docs/architecture.md): cli -> tune / api -> execute -> grid -> tasks; store at the bottom.

Notebook API:
    from runner import run_grid, load_grid, ResultStore
    report = run_grid("grids/deep_linear/demo_depth.yaml", results="results", executor="ray")

Names load on first use, so `import runner.store` (or a Ray worker importing runner.execute.worker)
pays only for what it uses.
"""

from __future__ import annotations

from tasks.lazy import lazy_exports

_EXPORTS = {
    "Cell": "runner.grid.spec",
    "ConfigError": "runner.errors",
    "Grid": "runner.grid.spec",
    "LocalExecutor": "runner.execute.local",
    "RayExecutor": "runner.execute.ray_pool",
    "ResultStore": "runner.store",
    "RunReport": "runner.api",
    "cells_from_store": "runner.api",
    "execute_cells": "runner.api",
    "load_grid": "runner.grid.spec",
    "plan": "runner.api",
    "run_grid": "runner.api",
    "run_study": "runner.tune.driver",
    "store_status": "runner.store.status",
}
__all__ = sorted(_EXPORTS)

__getattr__ = lazy_exports("runner", _EXPORTS)
