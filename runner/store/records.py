"""One finished run as the store receives it: data only, built by the worker that ran it.

A record carries its curve rows itself (`curve`), or, where its worker wrote them to the results root
(runner.store.incoming), only the `StagedPart` that holds them: then the records of one part with their
runs rows are the manifest the driver commits, and the curve never passes through the driver."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class StagedPart:
    """A part of curve rows a worker wrote under `_store/incoming/`, named like every part (its size and
    footer checksum, runner.store.part_names): the driver publishes it into curves/ without reading it.
    It holds the curve rows of `runs` runs of `task`, `rows` rows in all, every one with `batch_id`,
    written with `schema`."""

    path: str  # relative to the results root
    task: str
    batch_id: str
    runs: int
    rows: int
    schema: pa.Schema


@dataclass
class RunRecord:
    """One finished cell as the store wants it: a runs/ row and its curve columns (or the staged part
    holding them; then `row` has its `batch_id` and `curve_rows`)."""

    run_id: str
    task: str
    row: dict[str, Any]
    curve: dict[str, list[Any]] = field(default_factory=dict)
    staged: StagedPart | None = None
    # what the run printed, warned and logged (runner.execute.run_output; the logs/ table), "" if nothing
    log: str = ""

    @property
    def status(self) -> str:
        return str(self.row["status"])

    @property
    def curve_rows(self) -> int:
        if self.staged is not None:
            return int(self.row["curve_rows"])
        return len(self.curve.get("step", []))
