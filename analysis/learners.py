"""Where a learner's figures and claims live: `analysis/<task>/figures.py` and `claims.py` for a
built-in learner, `<package>.figures` / `<package>.claims` for one named in CONVGRID_LEARNERS.

Found by name, like the tasks themselves, so adding a learner edits no list here. Analysis imports
no task code: only these modules, which depend on pandas, numpy and matplotlib.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from types import ModuleType

from runner.settings import settings

_HERE = Path(__file__).resolve().parent


def _external() -> dict[str, str]:
    return settings().learner_packages()


def learners() -> list[str]:
    """Learners with an analysis folder here or named in the environment."""
    builtin = {d.name for d in _HERE.iterdir() if d.is_dir() and (d / "__init__.py").is_file()}
    return sorted(builtin | set(_external()))


def module(task: str, kind: str) -> ModuleType | None:
    """The `kind` ("figures" or "claims") module of `task`, or None where the learner has none."""
    package = _external().get(task, f"analysis.{task}")
    name = f"{package}.{kind}"
    try:
        if importlib.util.find_spec(name) is None:
            return None
    except ModuleNotFoundError:  # the package itself is missing
        return None
    return importlib.import_module(name)
