"""One driver per study: the study's lease (runner.coord.study_lease) held around its run, in the results
root where its trials/ rows go, keyed by the study's name and its storage's label."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runner.coord.study_lease import StudyLease
from runner.fs.exclusive import for_root
from runner.settings import settings
from runner.store import ResultStore
from runner.tune.optuna_adapter import storage_label


@contextmanager
def study_lease(results: str | Path | ResultStore, study: str, storage: str | None) -> Iterator[StudyLease | None]:
    """Hold the study's lease (runner.coord.study_lease) for the block: StudyBusy, having changed nothing,
    where another driver runs it. A root without create-if-absent (neither local nor S3) has no lease:
    one driver per study is then the user's to keep."""
    store = results if isinstance(results, ResultStore) else ResultStore(results)
    exclusive = for_root(store.root, store.fs)
    if exclusive is None:
        warnings.warn(
            f"{store.root}: no create-if-absent here, so nothing stops two drivers of study {study!r}", stacklevel=3
        )
        yield None
        return
    lease = StudyLease(store.files, exclusive, study, storage_label(storage, store), settings().lease_s)
    lease.acquire()
    try:
        yield lease
    finally:
        lease.release()
