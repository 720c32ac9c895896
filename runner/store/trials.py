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
    path = store.path("trials")
    if store.fs.get_file_info(path).type.name == "NotFound":
        return TRIAL_SCHEMA.empty_table()
    import pyarrow.dataset as ds

    table = ds.dataset(path, filesystem=store.fs, format="parquet", schema=TRIAL_SCHEMA).to_table()
    if study is not None:
        table = table.filter(pc.equal(table["study"], study))
    if storage is not None:
        table = table.filter(pc.equal(table["storage"], storage))
    if table.num_rows == 0:
        return table
    table = table.sort_by(
        [("storage", "ascending"), ("study", "ascending"), ("number", "ascending"), ("written", "descending")]
    )
    keys = list(zip(table["storage"].to_pylist(), table["study"].to_pylist(), table["number"].to_pylist(), strict=True))
    keep = [i == 0 or keys[i] != keys[i - 1] for i in range(len(keys))]
    return table.filter(pa.array(keep))
