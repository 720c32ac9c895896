"""convgrid's runner: grid files -> configs -> execution -> Parquet store; the CLI.

Notebook API:
    from runner import run_grid, load_grid, ResultStore
    report = run_grid("grids/deep_linear/demo_depth.yaml", results="results", executor="ray")
"""

from runner.api import RunReport, cells_from_store, execute_cells, plan, run_grid
from runner.errors import ConfigError
from runner.execute import LocalExecutor, RayExecutor
from runner.spec import Cell, Grid, load_grid
from runner.status import store_status
from runner.store import ResultStore

__all__ = [
    "Cell",
    "ConfigError",
    "Grid",
    "LocalExecutor",
    "RayExecutor",
    "ResultStore",
    "RunReport",
    "cells_from_store",
    "execute_cells",
    "load_grid",
    "plan",
    "run_grid",
    "run_study",
    "store_status",
]


def __getattr__(name: str) -> object:
    # The tuner imports Optuna; load it only when asked, so Ray workers (which import runner.worker,
    # hence this package) do not pay for it. `runner.tune` stays the module; its entry point is
    # `runner.run_study`.
    if name == "run_study":
        import importlib

        return importlib.import_module("runner.tune").run_study
    raise AttributeError(f"module 'runner' has no attribute {name!r}")
