"""One finished run as the store receives it: data only, built by the worker that ran it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunRecord:
    """One finished cell as the store wants it: a runs/ row and its curve columns."""

    run_id: str
    task: str
    row: dict[str, Any]
    curve: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return str(self.row["status"])
