"""The `trials/` table: one row per Optuna trial, written by the tuner, read by anyone.

Readers keep the newest row per (storage, study, number).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from runner.store.columns import TRIAL_SCHEMA
from runner.store.store import ResultStore


def write_trials(store: ResultStore, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        store.write_part(pa.Table.from_pylist(list(rows), schema=TRIAL_SCHEMA), "trials")


def read_trials(store: ResultStore, study: str | None = None, storage: str | None = None) -> pa.Table:
    """The newest row of each trial (optionally of one study / storage), sorted by study and number."""
    table = store.retrying(lambda: store.reader.read(store.parts("trials"), TRIAL_SCHEMA))
    if study is not None:
        table = table.filter(pc.equal(table["study"], study))
    if storage is not None:
        table = table.filter(pc.equal(table["storage"], storage))
    return newest_trials(table)


def newest_trials(table: pa.Table) -> pa.Table:
    """The newest row (by `written`) of each (storage, study, number)."""
    if table.num_rows == 0:
        return table
    table = table.sort_by(
        [("storage", "ascending"), ("study", "ascending"), ("number", "ascending"), ("written", "descending")]
    )
    keys = list(zip(table["storage"].to_pylist(), table["study"].to_pylist(), table["number"].to_pylist(), strict=True))
    keep = [i == 0 or keys[i] != keys[i - 1] for i in range(len(keys))]
    return table.filter(pa.array(keep))
