"""Optuna storages: a journal file in the results root by default, an RDB for a URL; how trials/ rows
label them; their trials counted by state. Part of the tuner's door to Optuna (runner.tune.optuna_adapter)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.errors import ConfigError, redact
from runner.tune.optuna_journal import journal_backend

if TYPE_CHECKING:
    from runner.store import ResultStore

JOURNAL_NAME = "optuna.journal"


@dataclass(frozen=True)
class StudyStorage:
    """An Optuna storage, and its label in trials/ (credentials redacted)."""

    label: str
    optuna_storage: Any = field(repr=False)  # read by the adapter (runner/tune/optuna_*.py) alone
    where: str = field(repr=False)  # how another process opens it: a journal's path, an RDB's URL


def open_storage(storage: str | None, store: ResultStore) -> StudyStorage:
    """Default: a journal file in the (local) results root; a URL is an RDB (PostgreSQL, MySQL, SQLite);
    any other string is a journal file path."""
    from optuna.storages import JournalStorage, RDBStorage

    if storage is not None and "://" in storage:
        try:
            return StudyStorage(storage_label(storage, store), RDBStorage(storage), storage)
        except Exception as exc:  # noqa: BLE001 - a driver or connection error is the user's URL
            raise ConfigError(
                f"cannot open storage {redact(storage)}: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}",
                key="--storage",
            ) from None
    if storage is None and not store.local:
        raise ConfigError(
            "an object-store results root needs --storage (an RDB URL or a journal file path)", key="--storage"
        )
    path = Path(storage) if storage is not None else Path(store.base) / JOURNAL_NAME
    if path.is_dir():
        raise ConfigError(f"{path} is a folder: give a journal file's path or an RDB URL", key="--storage")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        journal = JournalStorage(journal_backend(path))  # reads the whole journal once
    except (ValueError, KeyError) as exc:  # JSONDecodeError, UnicodeDecodeError: not an Optuna journal
        # a line before the last is damaged (a journal appended to after a torn line, before the tail was
        # checked: the records after it cannot be trusted to be whole), or the file is no journal at all
        raise ConfigError(
            f"{path} cannot be read as an Optuna journal ({type(exc).__name__}: {str(exc).splitlines()[0]}): "
            "a journal with a damaged line can be moved aside (its studies start again) or have the line cut "
            "by hand; else give a journal file's path (a new one is created) or an RDB URL",
            key="--storage",
        ) from None
    return StudyStorage(storage_label(storage, store), journal, str(path))


def reopen(where: str) -> Any:
    """The storage of `open_storage` again, in another process."""
    from optuna.storages import JournalStorage, RDBStorage

    return RDBStorage(where) if "://" in where else JournalStorage(journal_backend(Path(where)))


def storage_label(storage: str | None, store: ResultStore) -> str:
    """How trials/ rows and a study's lease name a storage (credentials redacted), without opening it."""
    if storage is not None and "://" in storage:
        return redact(storage)
    return "journal:" + (JOURNAL_NAME if storage is None else str(Path(storage).resolve()))


def trial_states(storage: StudyStorage) -> dict[str, Counter[str]]:
    """Study name -> its trials in the storage, counted by state (COMPLETE, PRUNED, FAIL, ...)."""
    import optuna

    out: dict[str, Counter[str]] = {}
    for summary in optuna.get_all_study_summaries(storage.optuna_storage, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=storage.optuna_storage)
        out[summary.study_name] = Counter(t.state.name for t in study.get_trials(deepcopy=False))
    return out


def quiet() -> None:
    """Optuna's per-trial INFO lines would drown the progress bar; warnings still show."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
