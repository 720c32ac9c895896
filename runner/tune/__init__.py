"""Optuna studies driven from the driver, trials evaluated by any executor, every trial a stored run.

study_file.py      the study file's model (pydantic; knows nothing of Optuna)
study_checks.py    the file checked against its task: every problem one ConfigError
spec.py            StudyPlan, one per sweep combination (load_study)
optuna_adapter.py  the door to Optuna (Study: ask, tell, report, trials; storages); optuna_*.py behind it
driver.py          a study's run: its storage, trials/ and members/ rows, the executor
schedule.py        when trials are asked and told (async or deterministic), behind ScheduleHost
pruning.py         the judge of intermediate values
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
