"""The results store, the bottom layer: Parquet files under a root, the rules to write, read and
compact them. It imports no task code, no executor, no torch and no Ray.

    from runner.store import ResultStore
    runs = ResultStore("results").read_runs("deep_linear").to_pandas()
"""

from runner.store.records import RunRecord
from runner.store.store import ResultStore, SchemaFor

__all__ = ["ResultStore", "RunRecord", "SchemaFor"]
