"""Planning in bounded memory: a grid's cells and a store's runs matched range of keys by range
(runner.store.spill), the grid's ids read a chunk at a time from the cache of validated blocks.
Spilled and in-memory matching give the same answers; the driver's memory does not grow with the grid."""

from __future__ import annotations

import hashlib
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from runner import ResultStore, run_grid
from runner.grid import cells
from runner.grid.key import grid_key_of
from runner.grid.spec import load_grid
from runner.run.members import write_grid_members
from runner.run.plan import plan_grid
from runner.store import index, index_keys
from runner.store.index import run_keys
from runner.store.parts import DamagedPartWarning
from runner.store.spill import PARTITIONS, KeySpill, key_range, matched
from tests.options import opts


def test_a_key_spill_gives_each_key_range_its_rows_in_the_order_added() -> None:
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**64, size=5_000, dtype=np.uint64)
    keys[100:110] = keys[7]  # one key added eleven times: its rows keep their order
    order = np.arange(len(keys))
    with KeySpill({"n": np.int64}, limit=10**9) as held, KeySpill({"n": np.int64}, limit=300) as spilled:
        for start in range(0, len(keys), 700):
            for spill in (held, spilled):
                spill.add(keys[start : start + 700], n=order[start : start + 700])
        assert not held.spilled and spilled.spilled and held.rows == spilled.rows == len(keys)
        folder = Path(spilled._files[0].name).parent
        ranges = list(matched(held, spilled))
        assert len(ranges) == PARTITIONS
        for p, (a, b) in enumerate(ranges):
            expected = order[key_range(keys) == p]  # this range's rows, in the order added
            assert a["n"].tolist() == b["n"].tolist() == expected.tolist()
            assert (a["key"] == keys[expected]).all()
        ((whole,),) = list(matched(held))  # nothing spilled: one range of every row
        assert whole["n"].tolist() == order.tolist()
    assert not folder.exists()  # the temp files go with the spill


FAULTY = {
    "name": "f",
    "blocks": [
        {"task": "faulty", "product": {"x": [float(x) for x in range(30)]}},
        {"task": "faulty", "product": {"x": [3.0, 31.0]}},  # x=3 again: one cell, at its first position
        {"task": "faulty", "params": {"x": 40.0, "fail": True}},
    ],
}


def _plan_both_ways(monkeypatch: pytest.MonkeyPatch, store: ResultStore, retry: bool = False) -> list[Any]:
    answers = []
    for limit in ("1000000", "4"):  # everything in memory; spilled past 4 rows
        monkeypatch.setenv("CONVGRID_SPILL_ROWS", limit)
        grid = load_grid(FAULTY)
        planned = plan_grid(grid, store, retry)
        answers.append((grid.ids.tolist(), grid.dropped.tolist(), planned.todo.tolist(), planned.done, planned.skipped))
    return answers


def test_planning_spilled_is_planning_in_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVGRID_CACHE", str(tmp_path / "cache"))
    part = {
        "name": "part",
        "blocks": [FAULTY["blocks"][0] | {"product": {"x": [0.0, 1.0, 2.0, 3.0]}}, FAULTY["blocks"][2]],
    }
    run_grid(part, tmp_path / "r", opts())
    store = ResultStore(tmp_path / "r")
    held, spilled = _plan_both_ways(monkeypatch, store)
    assert held == spilled
    ids, dropped, todo, done, skipped = held
    assert dropped == [30] and len(ids) == 32  # the repeated x=3
    assert (done, skipped, len(todo)) == (4, 1, 32 - 5)
    assert _plan_both_ways(monkeypatch, store, retry=True)[1][2] == sorted(todo + [31])  # the failed one, x=40
    by_hand = hashlib.sha256("\n".join(sorted({i.decode() for i in ids})).encode()).hexdigest()[:16]
    assert grid_key_of(np.array_split(np.array(ids, dtype="S32"), 5)) == grid_key_of([np.array(ids)]) == by_hand
    assert write_grid_members(store, load_grid(FAULTY)) == 32  # spilled: members of every cell, once
    assert write_grid_members(store, load_grid(FAULTY)) == 0
    members = store.read_members().to_pandas()
    assert sorted(members[members["grid"] == "f"]["run_id"]) == sorted(i.decode() for i in ids)


def test_a_grid_reads_its_ids_from_the_cache_and_computes_them_again_when_the_entry_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVGRID_CACHE", str(tmp_path / "cache"))
    grid = load_grid(FAULTY)
    ids = grid.ids.copy()
    assert all(source.held is None for source in grid.sources)  # on disk, not in memory
    entries = sorted((tmp_path / "cache").glob("*.npy"))
    entries[0].write_bytes(entries[0].read_bytes()[:-40])  # cut short under a running grid
    for entry in entries[1:]:
        entry.unlink()  # removed under it
    picked = np.array([31, 0, 17, 30])
    assert grid.ids_at(picked).tolist() == ids[picked].tolist() and grid.ids.tolist() == ids.tolist()
    monkeypatch.setenv("CONVGRID_CACHE", "off")
    off = load_grid(FAULTY)
    assert all(source.held is not None for source in off.sources) and off.ids.tolist() == ids.tolist()


def _filled_store(root: Path, grid_file: dict[str, Any]) -> tuple[ResultStore, Any]:
    """A store holding every cell of the grid as done: one real run's row under each cell's id."""
    run_grid({"name": "template", "blocks": [{"task": "least_squares", "params": TINY | {"lr": 0.5}}]}, root, opts())
    store, grid = ResultStore(root), load_grid(grid_file)
    row = pq.read_table(store.files.abs(store.parts("runs/task=least_squares")[0]))
    table = row.take(np.zeros(len(grid), dtype=np.int64))
    table = table.set_column(0, row.schema.field(0), pa.array(grid.ids.astype(str), pa.string()))
    store.write_part(table, "runs/task=least_squares")
    return store, grid


TINY = {"d_in": 1, "d_out": 1, "m": 1, "n_iters": 1}


def test_planning_holds_no_more_memory_for_a_grid_four_times_larger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tracemalloc's peak while a grid is loaded (ids from the cache) and planned against a store
    holding all of it: the same for 40,000 and 160,000 cells (ids were 32 bytes a cell, the store's
    keys 8 more: 6.4 MB more for the larger grid)."""
    monkeypatch.setenv("CONVGRID_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cells, "ID_ROWS", 8192)  # chunks and batches of 8,192: both grids are many of them
    monkeypatch.setattr(index_keys, "READ_ROWS", 8192)
    monkeypatch.setenv("CONVGRID_SPILL_ROWS", "8192")
    peaks = []
    for size in (40_000, 160_000):
        grid_file = {
            "blocks": [{"task": "least_squares", "params": TINY, "product": {"lr": [0.01, 0.02]}, "repeat": size // 2}]
        }
        store, _ = _filled_store(tmp_path / str(size), grid_file)
        load_grid(grid_file)  # its blocks computed into the cache
        tracemalloc.start()
        planned = plan_grid(load_grid(grid_file), store)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert (planned.done, len(planned.todo)) == (size, 0)
    assert peaks[1] < 1.25 * peaks[0], peaks


def test_a_part_that_fails_midway_is_left_out_whole_and_the_plan_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runs part that reads one batch, then fails (a page's checksum): its rows already in the spill
    are not counted; the plan starts over without it, as every reader leaves a damaged part out."""
    cells = [{"task": "faulty", "params": {"x": float(x)}} for x in range(4)]
    run_grid({"name": "a", "blocks": cells[:2]}, tmp_path, opts())
    run_grid({"name": "b", "blocks": cells[2:]}, tmp_path, opts())
    store = ResultStore(tmp_path)
    bad = store.parts("runs/task=faulty")[-1]
    real = index.part_batches
    monkeypatch.setattr(index_keys, "READ_ROWS", 1)

    def failing(fs: Any, path: str, wanted: Any, rows: int | None = None) -> Any:
        for i, batch in enumerate(real(fs, path, wanted, rows)):
            if path.endswith(bad) and i == 1:
                raise OSError("page checksum mismatch")
            yield batch

    monkeypatch.setattr(index, "part_batches", failing)
    grid = load_grid({"name": "all", "blocks": cells})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        planned = plan_grid(grid, store)
    assert (planned.done, planned.todo.tolist()) == (2, [2, 3])  # both of the bad part's runs to run again
    assert bad in store.damaged and any(issubclass(w.category, DamagedPartWarning) for w in caught)
    assert run_keys(grid.ids_at(planned.todo)).tolist() == run_keys(grid.ids[2:]).tolist()


def test_a_small_grid_against_a_large_store_keeps_only_its_own_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store side of a match keeps only the rows of the grid's runs while the grid is held in
    memory: planning 2 cells against 40 stored runs holds 1 row, spills nothing; a grid past the spill
    limit is matched against every stored run, spilled."""
    monkeypatch.setenv("CONVGRID_SPILL_ROWS", "4")
    xs = [float(x) for x in range(40)]
    run_grid({"name": "big", "blocks": [{"task": "faulty", "product": {"x": xs}}]}, tmp_path, opts())
    store = ResultStore(tmp_path)
    seen: list[tuple[int, bool]] = []
    real = index.spill_runs

    def spy(*args: Any, **kwargs: Any) -> KeySpill:
        spill = real(*args, **kwargs)
        seen.append((spill.rows, spill.spilled))
        return spill

    monkeypatch.setattr(index, "spill_runs", spy)
    small = load_grid({"name": "small", "blocks": [{"task": "faulty", "product": {"x": [1.0, 99.0]}}]})
    planned = plan_grid(small, store)
    assert (planned.done, planned.todo.tolist(), seen) == (1, [1], [(1, False)])
    assert write_grid_members(store, small) == 2
    larger = load_grid({"name": "larger", "blocks": [{"task": "faulty", "product": {"x": [*xs, 99.0]}}]})
    planned = plan_grid(larger, store)
    assert (planned.done, planned.todo.tolist(), seen[-1]) == (40, [40], (40, True))
