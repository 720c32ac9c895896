"""A store that trusts nothing it reads (issue 26): paths read from its own files stay inside the root,
the newest attempt is the last committed whatever the clocks say, the store's own I/O errors never
mark a run failed, and damaged or foreign parts are detected, never read as wrong numbers."""

from __future__ import annotations

import errno
import json
import random
import shutil
import warnings
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runner import ResultStore, run_grid
from runner.coord.claims import CLAIMS_DIR, UnreadableClaimWarning
from runner.errors import StoreIOError
from runner.execute import worker
from runner.store import part_names
from runner.store.parts import DamagedPartWarning
from runner.store.txn import QUARANTINE_DIR, TXN_DIR, BadMarkerWarning
from tests.conftest import CliResult, run_cell_by_cell
from tests.options import opts

GRID = {
    "name": "trust",
    "blocks": [
        {"task": "least_squares", "params": {"d_in": 6, "m": 20, "n_iters": 30}, "product": {"lr": [0.01, 0.02]}},
        {"task": "faulty", "product": {"x": [1.0, 2.0, 3.0]}},
    ],
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pristine")
    run_cell_by_cell(GRID, root)  # a part per run: damage hits one run
    return root


def _copy(pristine: Path, tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(pristine, root)
    return root


# ---- 1. paths read from the store's own files stay inside the root ----------------------------------


def _plant_marker(root: Path, body: dict[str, Any] | bytes) -> Path:
    (root / TXN_DIR).mkdir(parents=True, exist_ok=True)
    marker = root / TXN_DIR / "0-planted.json"
    marker.write_bytes(body if isinstance(body, bytes) else json.dumps(body).encode())
    return marker


@pytest.mark.parametrize(
    "body",
    [
        {"txn": "x", "adds": [], "removes": ["../victim.txt"], "moves": []},
        {"txn": "x", "adds": [], "removes": [], "moves": [["_store/payload", "../victim.txt"]]},
        {"txn": "x", "adds": [["_store/staging/x.part-1.parquet", "../victim.txt"]], "removes": [], "moves": []},
        {"txn": "x", "adds": [], "removes": ["/etc/hostname-convgrid-test"], "moves": []},
        {"txn": "x", "adds": [], "removes": ["runs/task=faulty/../../../victim.txt"], "moves": []},
        b'{"txn": "x", "adds": [], "rem',  # a truncated marker
        b"\xff\xfe not json",
    ],
    ids=["remove", "move", "add", "absolute", "dotdot", "truncated", "garbage"],
)
def test_a_planted_marker_touches_nothing_outside_the_root(
    pristine: Path, tmp_path: Path, body: dict[str, Any] | bytes, cli: Callable[..., CliResult]
) -> None:
    root = _copy(pristine, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (root / "_store" / "payload").write_text("attacker text")
    marker = _plant_marker(root, body)
    with pytest.warns(BadMarkerWarning, match=f"{marker.name}.*the next command that writes"):
        runs = ResultStore(root).read_runs("faulty")  # a reader skips it, and moves nothing
    assert runs.num_rows == 3 and marker.exists()
    with pytest.warns(BadMarkerWarning, match=f"{marker.name}.*moved to"):
        status = cli("status", str(root))  # every command recovers first: status included
    assert status.returncode == 0, status.stderr
    assert not marker.exists() and (root / QUARANTINE_DIR / "markers" / marker.name).exists()
    assert victim.read_text() == "mine"
    assert ResultStore(root).read_runs("faulty").num_rows == 3


def test_planted_claims_and_heartbeats_are_ignored_and_delete_nothing(
    pristine: Path, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    root = _copy(pristine, tmp_path)
    victim = tmp_path / "victim.json"
    victim.write_text("mine")
    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps({**GRID, "blocks": [*GRID["blocks"], {"task": "faulty", "params": {"x": 9.0}}]}))
    claims = root / CLAIMS_DIR / "anykey"
    (claims / "drivers").mkdir(parents=True)
    (claims / "drivers" / "x.json").write_text(json.dumps({"driver": "../../../../victim", "beat": 1}))
    (claims / "drivers" / "y.json").write_bytes(b"\x00garbage")
    (claims / "b000000-g000000.json").write_text("not json")
    with pytest.warns(UnreadableClaimWarning):
        status = cli("status", str(root))
    assert status.returncode == 0, status.stderr
    run = cli("run", str(grid), "--results", str(root), "--no-progress")
    assert run.returncode == 0 and "ran 1 of 6" in run.stdout, run.stdout + run.stderr
    assert victim.read_text() == "mine"


# ---- 2. the newest attempt is the last committed, whatever the clocks --------------------------------


class _Shifted(datetime):
    offset = timedelta(0)

    @classmethod
    def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
        return datetime.now(tz) + cls.offset


@pytest.fixture
def fail_once(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[bool], None]]:
    """Make every faulty run raise (True) or not (False), in this process."""
    from tests.toy_learner.task import FaultyTask

    real = FaultyTask.run
    failing = {"on": False}

    def run(self: FaultyTask, p: Any, ctx: Any) -> Any:
        if failing["on"]:
            raise RuntimeError("the first attempt fails")
        return real(self, p, ctx)

    monkeypatch.setattr(FaultyTask, "run", run)
    yield lambda on: failing.update(on=on)


@pytest.mark.parametrize("where", ["worker", "driver"])
@pytest.mark.parametrize("hours", [-1, 1])
def test_a_retry_wins_whatever_the_clocks_say(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fail_once: Callable[[bool], None],
    where: str,
    hours: int,
) -> None:
    """The issue's case: three runs fail, --retry-failed runs them with a clock an hour off (the worker's,
    which stamps `finished`, or the driver's, which names parts and transactions): runs/ holds the ok
    attempts (before: the failed rows stayed when the clock was behind)."""
    grid = {"name": "clock", "blocks": [GRID["blocks"][1]]}
    fail_once(True)
    first = run_grid(grid, tmp_path, opts())
    assert first.counts == {"failed": 3}
    fail_once(False)
    _Shifted.offset = timedelta(hours=hours)
    if where == "worker":
        monkeypatch.setattr(worker, "datetime", _Shifted)
    else:
        shifted_ns = part_names.time.time_ns() + hours * 3600 * 10**9
        monkeypatch.setattr(part_names.time, "time_ns", lambda: shifted_ns)
    retry = run_grid(grid, tmp_path, opts(), retry_failed=True)
    assert retry.counts == {"ok": 3}
    store = ResultStore(tmp_path)
    runs = store.read_runs("faulty", ["status", "commit_seq"]).to_pylist()
    assert sorted(r["status"] for r in runs) == ["ok"] * 3
    history = store.read_attempts("faulty", ["status", "commit_seq"]).to_pylist()
    for run_id in {r["run_id"] for r in runs}:  # commit order: the failed attempt, then the ok one
        assert [a["status"] for a in history if a["run_id"] == run_id] == ["failed", "ok"]
    assert run_grid(grid, tmp_path, opts()).executed == 0  # planning agrees: done


def test_of_two_records_of_one_run_in_one_flush_the_later_wins(tmp_path: Path) -> None:
    from runner.grid.schema import task_schemas
    from runner.store.flush import write_records
    from runner.store.records import RunRecord

    def record(square: float, finished: datetime) -> RunRecord:
        row = {"run_id": "ab" * 16, "version": "1", "status": "ok", "params_json": "{}", "x": 1.0}
        return RunRecord("ab" * 16, "faulty", {**row, "square": square, "finished": finished}, {})

    now = datetime.now(UTC)
    store = ResultStore(tmp_path)
    write_records(store, [record(1.0, now), record(2.0, now - timedelta(hours=1))], task_schemas)
    assert store.read_runs("faulty", ["square"])["square"].to_pylist() == [2.0]


# ---- 3. the store's own I/O errors never mark a run failed ------------------------------------------


def _disk_full(monkeypatch: pytest.MonkeyPatch, times: int | None) -> list[int]:
    """The parts of flushes (finished runs) fail to write with ENOSPC `times` times (None: always), as
    pyarrow reports it; returns the count of failures. (The members rows before, written, cost nothing
    to redo: the point is the computed runs.)"""
    from runner.store import txn

    real, failures = txn.Transaction.add, [0]

    def add(self: txn.Transaction, table: pa.Table, directory: str) -> str:
        if self.label == "flush" and (times is None or failures[0] < times):
            failures[0] += 1
            raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")
        return real(self, table, directory)

    monkeypatch.setattr(txn.Transaction, "add", add)
    return failures


def test_a_full_disk_that_frees_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.run import persist

    monkeypatch.setattr(persist, "STORE_RETRY_S", (0.0, 0.0, 0.0))
    failures = _disk_full(monkeypatch, times=2)
    with pytest.warns(persist.StoreRetryWarning, match="No space left"):
        report = run_grid(GRID, tmp_path, opts())
    assert failures[0] == 2 and report.counts == {"ok": 5}
    statuses = ResultStore(tmp_path).read_runs(None, ["status"])["status"].to_pylist()
    assert sorted(statuses) == ["ok"] * 5


def test_a_full_disk_stops_with_one_message_and_marks_nothing_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Callable[..., CliResult]
) -> None:
    from runner.run import persist

    grid = tmp_path / "grid.yaml"
    grid.write_text(json.dumps(GRID))
    root = tmp_path / "results"
    cli("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress", "--dry-run")
    monkeypatch.setattr(persist, "STORE_RETRY_S", (0.0,))
    _disk_full(monkeypatch, times=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", persist.StoreRetryWarning)
        full = cli("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress")
    assert full.returncode == 4, full.stdout + full.stderr
    message = full.stderr.strip().splitlines()
    assert len(message) == 1 and "No space left on device (ENOSPC)" in message[0] and str(root) in message[0]
    assert "Traceback" not in full.stderr
    monkeypatch.undo()
    assert not any(s == "failed" for s in ResultStore(root).read_runs(None, ["status"])["status"].to_pylist())
    again = cli("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress")
    assert again.returncode == 0 and "ran 5 of 5" in again.stdout, again.stdout + again.stderr


def test_store_io_error_names_the_root_and_the_cause() -> None:
    error = StoreIOError("s3://key:secret@bucket/r", OSError(errno.EROFS, "Read-only file system"), 3)
    text = str(error)
    assert "Read-only file system (EROFS)" in text and "3 finished runs were not stored" in text
    assert "secret" not in text


# ---- 4. damage is detected, never read as wrong numbers ---------------------------------------------


def _readers(root: Path) -> tuple[dict[str, list[Any]], int]:
    """What convgrid's readers give, and how many damaged-part warnings they raised."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = ResultStore(root)
        seen: dict[str, list[Any]] = {}
        for task in ("least_squares", "faulty"):
            runs = store.read_runs(task).sort_by("run_id").drop_columns(["finished"])
            seen[f"runs/{task}"] = runs.to_pylist()
            seen[f"curves/{task}"] = store.read_curves(task).to_pylist()
    return seen, sum(issubclass(w.category, DamagedPartWarning) for w in caught)


def _without(seen: dict[str, list[Any]], run_ids: set[str], folder: str) -> dict[str, list[Any]]:
    """`seen` with the rows of `run_ids` gone from `folder`'s views (a part skipped whole), and from the
    curves too when a runs part is skipped (a run without its row has no kept curves)."""
    out = dict(seen)
    for key, rows in seen.items():
        if key.startswith(folder) or (folder == "runs" and key.startswith("curves")):
            out[key] = [r for r in rows if r["run_id"] not in run_ids]
    return out


@pytest.mark.parametrize("folder", ["runs", "curves"])
def test_flipped_bytes_are_never_a_silent_wrong_answer(pristine: Path, tmp_path: Path, folder: str) -> None:
    """Single flipped bytes across a committed part (every footer byte of a sample, and data bytes):
    the readers give exactly the pristine content, or the content without that part's runs and a
    warning naming it; never anything else. (Before footer checksums, 36 of ~9,400 variants read wrong.)"""
    root = _copy(pristine, tmp_path)
    expected, _ = _readers(root)
    victim = sorted((root / folder / "task=least_squares").glob("part-*.parquet"))[0]
    lost = set(pq.read_table(victim, columns=["run_id"])["run_id"].to_pylist())
    skipped = _without(expected, lost, folder)
    data = victim.read_bytes()
    footer = len(part_names.tail_of(data))
    rng = random.Random(0)
    positions = rng.sample(range(len(data) - footer, len(data)), min(120, footer))
    positions += rng.sample(range(len(data) - footer), 40)
    outcomes = {"same": 0, "skipped": 0}
    for position in positions:
        flipped = bytearray(data)
        flipped[position] ^= 1 << rng.randrange(8)
        victim.write_bytes(bytes(flipped))
        seen, warned = _readers(root)
        if seen == expected:
            outcomes["same"] += 1  # a bit no reader uses
            continue
        assert warned and seen == skipped, f"byte {position} of {victim.name}: read differently, silently"
        outcomes["skipped"] += 1
    victim.write_bytes(data)
    assert outcomes["skipped"] >= 100  # nearly every flip is caught, the footer's by its checksum


def test_a_part_of_the_wrong_kind_is_skipped_and_quarantined(
    pristine: Path, tmp_path: Path, cli: Callable[..., CliResult]
) -> None:
    root = _copy(pristine, tmp_path)
    before, _ = _readers(root)
    # a runs part whose status column is binary (a legacy name: no checksum to catch it)
    table = pq.read_table(sorted((root / "runs" / "task=faulty").glob("part-*.parquet"))[0])
    members = sorted((root / "members").glob("part-*.parquet"))[0]
    foreign = root / "runs" / "task=faulty" / members.name
    shutil.copy(members, foreign)  # a members part where runs belong
    binary = table.set_column(table.schema.get_field_index("status"), "status", table["status"].cast(pa.binary()))
    typed = root / "runs" / "task=faulty" / f"part-{part_names.new_id()}.parquet"
    pq.write_table(binary, typed)
    seen, warned = _readers(root)
    assert warned == 2 and seen == before
    status = cli("status", str(root))
    assert status.returncode == 0 and foreign.name in status.stdout and typed.name in status.stdout
    repaired = cli("compact", str(root), "--repair")
    assert repaired.returncode == 0 and not foreign.exists() and not typed.exists(), repaired.stdout
    assert "binary" not in str(ResultStore(root).file_schema("runs", "faulty"))


def test_a_truncated_or_extended_part_is_caught_by_its_size(pristine: Path, tmp_path: Path) -> None:
    root = _copy(pristine, tmp_path)
    expected, _ = _readers(root)
    victim = sorted((root / "runs" / "task=faulty").glob("part-*.parquet"))[0]
    assert part_names.expected(victim.name) is not None
    lost = set(pq.read_table(victim, columns=["run_id"])["run_id"].to_pylist())
    data = victim.read_bytes()
    for damaged in (data + b"\0" * 16, data[:-1], b""):
        victim.write_bytes(damaged)
        seen, warned = _readers(root)
        assert warned and seen == _without(expected, lost, "runs")
