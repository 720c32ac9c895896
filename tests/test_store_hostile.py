"""Nothing in a results root turns against its user (issue 44): a symbolic link planted in the store's
own folders is never followed out of the root, a forged commit sequence cannot stop a task's writes,
the union schema part is checked before a reader is told to trust it, an empty task folder is no
crash."""

from __future__ import annotations

import json
import os
import shutil
import socket
import warnings
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runner import ResultStore
from runner.fs.root import SymlinkInRoot
from runner.store import part_names
from runner.store.incoming import SymlinkQuarantined, sweep
from runner.store.parts import DamagedPartWarning
from runner.store.txn import INCOMING_DIR, QUARANTINE_DIR, TXN_DIR, BadMarkerWarning
from tests.conftest import CliResult, run_cell_by_cell

GRID = {
    "name": "hostile",
    "blocks": [
        {"task": "least_squares", "params": {"d_in": 6, "m": 20, "n_iters": 30}, "product": {"lr": [0.01, 0.03]}},
        {"task": "faulty", "product": {"x": [1.0, 2.0]}},
    ],
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine44")
    run_cell_by_cell(GRID, root)
    return root


@pytest.fixture
def root(pristine: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy, symlinks=True)
    return copy


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A folder outside the root that must come through every command untouched."""
    folder = tmp_path / "elsewhere"
    (folder / "sub").mkdir(parents=True)
    (folder / "victim.txt").write_text("mine")
    (folder / "sub" / "deep.parquet").write_text("mine too")
    return folder


def _untouched(folder: Path) -> None:
    assert (folder / "victim.txt").read_text() == "mine"
    assert (folder / "sub" / "deep.parquet").read_text() == "mine too"


# ---- 1. the incoming sweep never follows a link ---------------------------------------------------


@pytest.mark.parametrize("age", ["dead driver of this host", "any age"])
def test_the_incoming_sweep_quarantines_a_link_and_deletes_nothing_through_it(
    root: Path, elsewhere: Path, age: str, cli: Callable[..., CliResult]
) -> None:
    (root / INCOMING_DIR).mkdir(parents=True, exist_ok=True)
    name = f"20250101-abc.999999.{socket.gethostname()}" if age.startswith("dead") else "20250101-abc"
    link = root / INCOMING_DIR / name
    link.symlink_to(elsewhere)
    # one planted inside a session folder too: a writer's folder that is a link
    session = root / INCOMING_DIR / "20250102-def.1.otherhost"
    session.mkdir()
    (session / "w0").symlink_to(elsewhere / "sub")
    with pytest.warns(SymlinkQuarantined, match=name):
        result = cli("compact", str(root))
    assert result.returncode == 0, result.stderr
    _untouched(elsewhere)
    assert not link.is_symlink() and not (session / "w0").is_symlink()
    assert len(list((root / QUARANTINE_DIR / "links").iterdir())) == 2  # the links themselves, named


def test_the_age_rule_deletes_nothing_through_a_link(root: Path, elsewhere: Path) -> None:
    (root / INCOMING_DIR).mkdir(parents=True, exist_ok=True)
    (root / INCOMING_DIR / "s").symlink_to(elsewhere)
    store = ResultStore(root)
    with pytest.warns(SymlinkQuarantined), store.writing():
        sweep(store.files, grace_s=-1.0, force=True)  # every part "old": the age rule at its widest
    _untouched(elsewhere)


def test_incoming_itself_a_link_is_refused_by_name(root: Path, elsewhere: Path, cli: Callable[..., CliResult]) -> None:
    shutil.rmtree(root / INCOMING_DIR, ignore_errors=True)
    (root / INCOMING_DIR).symlink_to(elsewhere)
    result = cli("compact", str(root))
    assert result.returncode == 2 and "incoming" in result.stderr and "symbolic link" in result.stderr
    _untouched(elsewhere)


# ---- 2. a marker never reaches through a linked folder ------------------------------------------------


@pytest.mark.parametrize("kind", ["remove", "move", "add"])
def test_a_legal_looking_marker_through_a_linked_folder_touches_nothing(
    root: Path, elsewhere: Path, kind: str, cli: Callable[..., CliResult]
) -> None:
    (root / "runs" / "task=evil").symlink_to(elsewhere)
    (root / "_store" / "staging").mkdir(parents=True, exist_ok=True)
    staged, victim = "_store/staging/x.part-1.parquet", "runs/task=evil/victim.txt"
    (root / staged).write_text("attacker")
    body = {
        "remove": {"txn": "x", "adds": [], "removes": ["runs/task=evil/victim.txt"], "moves": []},
        "move": {"txn": "x", "adds": [], "removes": [], "moves": [[victim, "_store/quarantine/v"]]},
        "add": {"txn": "x", "adds": [[staged, "runs/task=evil/victim.txt"]], "removes": [], "moves": []},
    }[kind]
    (root / TXN_DIR).mkdir(parents=True, exist_ok=True)
    marker = root / TXN_DIR / "0-planted.json"
    marker.write_text(json.dumps(body))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        status = cli("status", str(root))
    _untouched(elsewhere)
    named = [str(w.message) for w in seen if issubclass(w.category, BadMarkerWarning)]
    assert named and "symbolic link" in named[0] and "task=evil" in named[0]
    assert not marker.exists()  # quarantined, not applied
    # the linked task folder itself is refused by name, never read through
    assert status.returncode == 2 and "task=evil" in status.stderr and "symbolic link" in status.stderr


def test_a_data_folder_that_is_a_link_is_refused_not_read(root: Path, elsewhere: Path) -> None:
    shutil.rmtree(root / "curves" / "task=faulty")
    (root / "curves" / "task=faulty").symlink_to(elsewhere)
    with pytest.raises(SymlinkInRoot, match="task=faulty"):
        ResultStore(root).read_curves("faulty")
    _untouched(elsewhere)


# ---- 5. an empty task folder ------------------------------------------------------------------------------


def test_compact_with_an_empty_task_folder(root: Path, cli: Callable[..., CliResult]) -> None:
    (root / "runs" / "task=empty").mkdir()
    (root / "attempts" / "task=empty2").mkdir()
    before = {t: ResultStore(root).read_runs(t).num_rows for t in ("least_squares", "faulty")}
    result = cli("compact", str(root))
    assert result.returncode == 0, result.stderr
    assert {t: ResultStore(root).read_runs(t).num_rows for t in before} == before
    assert cli("status", str(root)).returncode == 0
    assert not os.listdir(root / "runs" / "task=empty")  # nothing written for it


# ---- 3. a forged or unknown commit sequence ----------------------------------------------------------


def _plant_part(root: Path, folder: str, table: pa.Table, statistics: bool = True) -> Path:
    """`table` as a part under a valid name (size and footer CRC right): what a tool or an attacker can write."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, write_statistics=statistics)
    data = sink.getvalue()
    path = root / folder / part_names.name_for(data.size, part_names.tail_of(memoryview(data)))
    path.write_bytes(data.to_pybytes())
    return path


def _attempts(root: Path) -> pa.Table:
    store = ResultStore(root)
    parts = store.parts("attempts/task=faulty")
    return store.reader.read(parts, store.reader.unified_schema(parts))


def _one_more(root: Path, x: float) -> None:
    grid = {"name": "hostile", "blocks": [{"task": "faulty", "params": {"x": x}}]}
    run_cell_by_cell(grid, root)


def test_a_forged_commit_seq_stops_nothing_and_repair_quarantines_it(root: Path, cli: Callable[..., CliResult]) -> None:
    forged = _attempts(root).slice(0, 1)
    forged = forged.set_column(forged.schema.get_field_index("commit_seq"), "commit_seq", pa.array([2**63 - 1]))
    planted = _plant_part(root, "attempts/task=faulty", forged)
    with pytest.warns(DamagedPartWarning, match=f"{planted.name}.*commit_seq {2**63 - 1}"):
        _one_more(root, 7.0)  # a traceback (OverflowError) before, and the run not stored
    store = ResultStore(root)
    assert "hostile" in {g for g in store.read_members()["grid"].to_pylist()}
    seqs = _attempts(root)["commit_seq"].to_pylist()
    assert max(s for s in seqs if s != 2**63 - 1) < 100  # numbered after the store's own
    status = cli("status", str(root))
    assert planted.name in status.stdout + status.stderr  # named as damaged
    repaired = cli("compact", "--repair", str(root))
    assert repaired.returncode == 0, repaired.stderr
    assert not planted.exists() and list((root / QUARANTINE_DIR).rglob(planted.name))
    assert 2**63 - 1 not in _attempts(root)["commit_seq"].to_pylist()
    _one_more(root, 8.0)
    assert ResultStore(root).read_runs("faulty").num_rows == 4


def test_missing_statistics_never_read_as_zero(root: Path) -> None:
    stored = _attempts(root)
    high = max(stored["commit_seq"].to_pylist())
    later = stored.slice(0, 1)
    later = later.set_column(later.schema.get_field_index("commit_seq"), "commit_seq", pa.array([high + 5]))
    _plant_part(root, "attempts/task=faulty", later, statistics=False)
    store = ResultStore(root)
    parts = store.reader.readable(store.parts("attempts/task=faulty"))
    assert store.runs_index.next_seq(parts) == high + 6  # 0 for the planted part, so high + 1, before


# ---- 4. the union schema part ---------------------------------------------------------------------------


def _union_part(root: Path) -> Path:
    (part,) = (root / "runs" / "task=_schema").glob("part-*.parquet")
    return part


def test_a_missing_union_part_is_named_and_rebuilt(root: Path, cli: Callable[..., CliResult]) -> None:
    import pandas as pd

    columns = set(pd.read_parquet(root / "runs").columns)
    shutil.rmtree(root / "runs" / "task=_schema")
    assert set(pd.read_parquet(root / "runs").columns) < columns  # what a plain client silently loses
    status = cli("status", str(root))
    assert "runs/task=_schema: missing" in status.stdout
    compacted = cli("compact", str(root))
    assert compacted.returncode == 0 and "union schema part of runs" in compacted.stdout, compacted.stdout
    assert set(pd.read_parquet(root / "runs").columns) == columns
    assert "_schema" not in cli("status", str(root)).stdout


def test_a_union_part_of_the_wrong_type_is_named_and_rebuilt(root: Path, cli: Callable[..., CliResult]) -> None:
    import pandas as pd

    part = _union_part(root)
    schema = pq.read_schema(part)
    wrong = schema.set(schema.get_field_index("lr"), pa.field("lr", pa.float32()))
    part.unlink()
    _plant_part(root, "runs/task=_schema", wrong.empty_table())
    lrs = sorted(pd.read_parquet(root / "runs")["lr"].dropna())
    assert lrs[1] != 0.03  # float32: what pandas silently returned
    status = cli("status", str(root))
    assert "runs/task=_schema: lr is float where the tasks have double" in status.stdout, status.stdout
    assert cli("compact", str(root)).returncode == 0
    assert sorted(pd.read_parquet(root / "runs")["lr"].dropna()) == [0.01, 0.03]
    assert pq.read_schema(_union_part(root)).field("lr").type == pa.float64()


# ---- 9. only a run's own bad data makes it failed --------------------------------------------------------


def test_a_fault_of_the_flush_ends_the_command_and_fails_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult]
) -> None:
    from runner.store import flush

    def broken(*_: object, **__: object) -> None:
        raise KeyError("a bug in the flush")

    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"name": "bug", "blocks": [{"task": "faulty", "product": {"x": [1.0, 2.0]}}]}))
    root = tmp_path / "store"
    monkeypatch.setattr(flush, "stage_union", broken)
    result = cli("run", str(grid), "--results", str(root), "--no-progress")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "could not store" in result.stderr and "KeyError: 'a bug in the flush'" in result.stderr
    assert not (root / "runs").exists()  # no run stored as failed
    monkeypatch.undo()
    again = cli("run", str(grid), "--results", str(root), "--no-progress")
    assert again.returncode == 0 and "ran 2 of 2" in again.stdout, again.stdout + again.stderr
