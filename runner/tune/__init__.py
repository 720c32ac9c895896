"""Optuna studies driven from the driver, trials evaluated by any executor, every trial a stored run.

spec.py            the study file model (knows nothing of Optuna)
optuna_adapter.py  the one module that speaks Optuna: samplers, pruners, storages, distributions
driver.py          ask -> run (through an Executor and its report channel) -> tell
pruning.py         the judge of intermediate values (trial.report / should_prune)
trials.py          a run's row -> a trial's state; the tune report
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # Optuna loads only when a study is run, not when the package is imported.
    if name in ("run_study", "tune"):
        from runner.tune import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'runner.tune' has no attribute {name!r}")
