"""Grids at scale: streamed expansion (cells rebuilt from their positions), the settled-run index that
answers a re-submitted grid, members written column-wise, and invalid cells refused before any write."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from runner import ResultStore, run_grid
from runner.cli import main
from runner.errors import ConfigError
from runner.execute.base import WorkItem
from runner.execute.local import LocalExecutor
from runner.grid.blocks import check_block
from runner.grid.model import GridSpec
from runner.grid.spec import load_grid
from runner.run.plan import plan_grid
from runner.store import RunRecord
from runner.store.index import id_array, run_keys
from tests.faulty_inputs import grid_with_a_failure
from tests.options import opts

PARAMS = {"d_in": 4, "m": 10, "n_iters": 5}


def _grid(lrs: list[float], name: str = "scale") -> dict[str, Any]:
    return {
        "name": name,
        "blocks": [
            {"task": "least_squares", "params": PARAMS, "product": {"lr": lrs, "d_out": [2, 3]}, "repeat": 2},
            {
                "task": "least_squares",
                "params": {"m": 10, "n_iters": 5, "lr_rule": "optimal"},
                "zip": {"d_in": [3, 4], "tol": [1e-6, 1e-8]},
            },
            {"task": "least_squares", "params": {**PARAMS, "lr": lrs[0], "d_out": 3, "seed": 1}},  # in block 0 too
        ],
    }


def test_streamed_grid_rebuilds_every_cell_as_the_eager_expansion_does() -> None:
    raw = _grid([0.01, 0.02, 0.03])
    grid = load_grid(raw)
    # The independent computation: every block expanded eagerly, the first cell of each run id kept.
    eager: dict[str, Any] = {}
    for index, block in enumerate(GridSpec.model_validate(raw).blocks):
        checked = check_block(block, "<grid>", index)
        for cell in (checked.cell(raw) for raw in checked.raws()):
            eager.setdefault(cell.run_id, cell)
    assert [i.decode() for i in grid.ids] == list(eager) and len(grid) == 3 * 2 * 2 + 2
    picked = random.Random(0).sample(range(len(grid)), 7)
    for i, cell in zip(picked, grid.cells_at(picked), strict=True):
        assert cell == list(eager.values())[i]


def test_run_keys_are_the_ids_first_64_bits() -> None:
    ids = [hashlib.sha256(str(i).encode()).hexdigest()[:32] for i in range(500)]
    assert run_keys(id_array(ids)).tolist() == [int(i[:16], 16) for i in ids]
    with pytest.raises(ValueError, match="hexadecimal"):
        run_keys(id_array(["ABCDEF0123456789" * 2]))


class CountingExecutor:
    """The local executor, remembering which run ids it was given."""

    name = "counting"

    def __init__(self) -> None:
        self.inner = LocalExecutor()
        self.ran: list[str] = []

    def start(self) -> None:
        self.inner.start()

    def execute(
        self, items: Iterable[WorkItem], channel: Any = None, doorbell: Any = None
    ) -> Iterator[list[RunRecord]]:
        def seen() -> Iterator[WorkItem | list[WorkItem] | None]:
            for item in items:  # a source may also give groups, and None for "nothing yet" (runner.execute.feed)
                self.ran += [i.run_id for i in (item if isinstance(item, list) else [item]) if i is not None]
                yield item

        return self.inner.execute(seen(), channel, doorbell)

    def report_channel(self, judge: Any, spec: Any) -> Any:
        return self.inner.report_channel(judge, spec)

    def close(self) -> None:
        self.inner.close()


def test_resubmit_runs_nothing_and_an_edited_cell_alone(tmp_path: Path) -> None:
    first = run_grid(_grid([0.01, 0.02]), tmp_path, opts())
    assert first.executed == len(load_grid(_grid([0.01, 0.02]))) == 10
    spy = CountingExecutor()
    again = run_grid(_grid([0.01, 0.02]), tmp_path, opts(), executor=spy)
    assert again.executed == 0 and again.already_done == 10 and spy.ran == []
    edited = load_grid(_grid([0.01, 0.025]))
    new_ids = {i.decode() for i in edited.ids} - {i.decode() for i in load_grid(_grid([0.01, 0.02])).ids}
    report = run_grid(_grid([0.01, 0.025]), tmp_path, opts(), executor=spy)
    assert report.executed == len(new_ids) == 4 and set(spy.ran) == new_ids and len(spy.ran) == 4
    # members: each (grid, run) once, however often the grid was submitted
    members = ResultStore(tmp_path).read_members().to_pandas()
    assert not members.duplicated(["grid", "run_id"]).any()
    assert set(members["run_id"]) == {i.decode() for i in edited.ids} | {i.decode() for i in first_ids()}
    row = members[members["run_id"] == sorted(new_ids)[0]].iloc[0]
    assert (row["task"], row["grid"], row["kind"], row["block"]) == ("least_squares", "scale", "grid", 0)


def first_ids() -> np.ndarray:
    return load_grid(_grid([0.01, 0.02])).ids


def test_the_index_skips_failed_runs_unless_retried(tmp_path: Path) -> None:
    grid = grid_with_a_failure([1.0, 2.0], 3.0)
    run_grid(grid, tmp_path, opts())
    store, cells = ResultStore(tmp_path), load_grid(grid)
    planned = plan_grid(cells, store)
    assert (planned.done, planned.skipped, planned.todo.tolist()) == (2, 1, [])
    retry = plan_grid(cells, store, retry_failed=True)
    assert (retry.done, retry.skipped, retry.todo.tolist()) == (2, 0, [2])


def test_an_invalid_cell_anywhere_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "g.yaml"
    # 3000 valid cells, then one whose lr is out of range: streamed validation still sees it first.
    path.write_text(
        "blocks:\n"
        "  - {task: least_squares, params: {d_in: 2, m: 3, n_iters: 1}, product: {lr: [0.1, 0.2, 0.3]}, repeat: 1000}\n"
        "  - {task: least_squares, params: {d_in: 2, m: 3, n_iters: 1, lr: -1}}\n"
    )
    results = tmp_path / "res"
    assert main(["run", str(path), "--results", str(results), "--executor", "local", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: block 1: key 'lr': Input should be greater than 0" in err
    assert not results.exists() or not any(p.is_file() for p in results.rglob("*"))


def test_the_cell_limit_counts_before_expanding_and_lets_a_million_through(tmp_path: Path) -> None:
    million = {"blocks": [{"task": "least_squares", "product": {"lr": [0.1, 0.2]}, "repeat": 100_000}] * 5}
    from runner.grid.blocks import block_size
    from runner.grid.spec import max_cells_default

    assert sum(block_size(b) for b in GridSpec.model_validate(million).blocks) == 1_000_000 <= max_cells_default()
    over = {"blocks": [*million["blocks"], {"task": "least_squares"}]}
    with pytest.raises(ConfigError, match=r"1,000,001 cells .* more than the limit of 1,000,000"):
        load_grid(over, max_cells=1_000_000)  # refused at once: counting is arithmetic, not expansion


def test_a_validated_block_is_read_back_from_the_cache_and_an_edit_or_new_code_misses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.grid import cache
    from runner.grid.blocks import Block

    monkeypatch.setenv("CONVGRID_CACHE", str(tmp_path / "cache"))
    ids = load_grid(_grid([0.01, 0.02])).ids
    assert len(list((tmp_path / "cache").glob("*.npy"))) == 3  # one entry per block

    def no_validation(self: Block, raw: dict[str, Any]) -> Any:
        raise AssertionError("validated a cell that the cache holds")

    real_cell = Block.cell
    monkeypatch.setattr(Block, "cell", no_validation)
    assert load_grid(_grid([0.01, 0.02])).ids.tolist() == ids.tolist()
    with pytest.raises(AssertionError, match="validated a cell"):
        load_grid(_grid([0.01, 0.025]))  # an edited block is expanded again
    monkeypatch.setattr(cache, "code_fingerprint", lambda task: "other code")
    with pytest.raises(AssertionError, match="validated a cell"):
        load_grid(_grid([0.01, 0.02]))  # other code: other keys
    monkeypatch.setattr(Block, "cell", real_cell)
    assert load_grid(_grid([0.01, 0.02])).ids.tolist() == ids.tolist()


def test_an_invalid_block_is_never_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.grid import cache

    monkeypatch.setenv("CONVGRID_CACHE", str(tmp_path / "cache"))
    bad = {"blocks": [{"task": "least_squares", "product": {"lr": [0.1, -1.0]}}]}
    for _ in range(2):
        with pytest.raises(ConfigError, match="key 'lr': Input should be greater than 0"):
            load_grid(bad)
    assert not list((tmp_path / "cache").glob("*"))
    monkeypatch.setenv("CONVGRID_CACHE", "off")
    assert cache.entry(load_grid(_grid([0.01])).blocks[0].task, {}) is None


def test_a_fragmented_store_is_compacted_after_a_run_and_reads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def stored(root: Path) -> list[dict[str, Any]]:
        table = ResultStore(root).read_runs("least_squares", columns=["status", "err_final", "lr"])
        return table.drop_columns(["finished"]).sort_by("run_id").to_pylist()

    monkeypatch.setenv("CONVGRID_COMPACT_PARTS", "0")  # never: the reference store keeps one part per flush
    run_grid(_grid([0.01, 0.02]), tmp_path / "ref", opts(flush_every=1))
    # flushes waiting for the group-commit writer share a commit: fewer parts than flushes, but several
    assert len(ResultStore(tmp_path / "ref").parts("runs/task=least_squares")) > 1
    monkeypatch.setenv("CONVGRID_COMPACT_PARTS", "1")
    report = run_grid(_grid([0.01, 0.02]), tmp_path / "auto", opts(flush_every=1))
    assert report.compacted is not None and report.compacted.startswith("merged ") and report.compacted in report.line()
    store = ResultStore(tmp_path / "auto")
    assert len(store.parts("runs/task=least_squares")) == 1 and len(store.parts("curves/task=least_squares")) == 1
    assert stored(tmp_path / "auto") == stored(tmp_path / "ref")
    assert run_grid(_grid([0.01, 0.02]), tmp_path / "auto", opts()).compacted is None


def test_auto_runs_small_work_in_process_judged_from_stored_run_times(tmp_path: Path) -> None:
    from runner.run.plan import expected_seconds

    store = ResultStore(tmp_path)
    edited = load_grid(_grid([0.01, 0.025]))
    assert expected_seconds(edited, np.arange(len(edited)), store, 3.0) is None  # no stored times: unknown work
    run_grid(_grid([0.01, 0.02]), tmp_path, opts())
    todo = plan_grid(edited, store).todo
    times = store.read_runs("least_squares", ["wall_s"])["wall_s"].to_pylist()
    expected = expected_seconds(edited, todo, store, 3.0)
    assert len(todo) == 4 and expected is not None and min(times) * 4 <= expected <= max(times) * 4
    assert expected_seconds(edited, todo, store, 1e-9) is None  # more runs than a millisecond each allows
    report = run_grid(_grid([0.01, 0.025]), tmp_path, opts("auto"))
    assert (report.executor, report.executed) == ("local", 4)


def test_a_tasks_schemas_come_back_from_the_cache_without_the_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.grid import cache, schema
    from tasks import get_task

    monkeypatch.setenv("CONVGRID_CACHE", str(tmp_path))
    task = get_task("least_squares")
    expected = (schema.runs_schema(task), schema.curves_schema(task))
    path = cache.schemas_entry("tasks.least_squares")
    assert path is not None and cache.load_schemas(path) is None
    cache.store_schemas(path, expected)
    loaded = cache.load_schemas(path)
    assert loaded is not None and all(a.equals(b, check_metadata=True) for a, b in zip(loaded, expected, strict=True))
    schema._schemas.cache_clear()
    monkeypatch.setattr(schema, "get_task", lambda name: pytest.fail("the task was imported"))
    assert schema.task_schemas("least_squares") == loaded
    schema._schemas.cache_clear()
    path.write_bytes(b"damaged")
    monkeypatch.undo()
    monkeypatch.setenv("CONVGRID_CACHE", str(tmp_path))
    assert schema.task_schemas("least_squares") == expected  # a damaged entry: built again, and stored
    assert cache.load_schemas(path) == expected
    schema._schemas.cache_clear()


def test_stored_ids_that_are_not_run_ids_are_left_out_of_the_index() -> None:
    import pyarrow as pa

    from runner.store.index import stored_keys

    good = hashlib.sha256(b"x").hexdigest()[:32]
    assert stored_keys(pa.array(["r1", good, good.upper(), good + "0"])).tolist() == [int(good[:16], 16)]


def test_the_grid_key_is_the_hash_of_the_sorted_distinct_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.grid import key

    def by_hand(ids: list[str]) -> str:  # the definition, computed on Python strings
        return hashlib.sha256("\n".join(sorted(set(ids))).encode()).hexdigest()[:16]

    monkeypatch.setattr(key, "KEY_CHUNK", 7)  # several chunks, the last one short
    ids = [hashlib.sha256(str(i).encode()).hexdigest()[:32] for i in range(50)]
    assert key.grid_key_of([id_array(ids)]) == key.grid_key_of([id_array(ids[::-1] + ids[:5])]) == by_hand(ids)
    tied = ids + ["0" * 16 + i[16:] for i in ids[:3]]  # equal 64-bit keys: the ids themselves are sorted
    assert key.grid_key_of([id_array(tied[:20]), id_array(tied[20:])]) == by_hand(tied)
    assert key.grid_key_of([id_array([])]) == by_hand([])


def test_claiming_a_wave_holds_positions_not_a_string_per_cell(tmp_path: Path) -> None:
    """tracemalloc of the claims' first wave over 200,000 cells: a few bytes a cell (int64 positions
    and the sorted copy of the plan), where a run id as a Python str alone is ~80 bytes."""
    import tracemalloc

    from runner.coord.claims import Blocks, Claims
    from runner.fs.exclusive import LocalLink
    from runner.fs.root import Root

    cells = 200_000
    blocks = Blocks.of(cells)
    todo = np.arange(cells, dtype=np.int64)[1::2]  # every other cell left to run
    drivers = Claims(Root(ResultStore(tmp_path).fs, str(tmp_path)), LocalLink(), "k", lease_s=60.0)
    drivers.start()
    try:
        tracemalloc.start()
        first = next(drivers.waves(blocks, todo, lambda positions: positions))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        drivers.close()
    assert first is not None and [b for b, _ in first] == list(range(16))  # a quarter of 64 blocks, in order
    assert all(np.array_equal(p, blocks.span(b)[blocks.span(b) % 2 == 1]) for b, p in first)  # its todo positions
    assert peak < 24 * cells


def test_the_streamed_index_keeps_each_runs_newest_status_as_the_store_s_reader_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs parts holding several rows of one run (a store from before runs/ kept only the newest, or
    two drivers), a null `finished`, an id that is no run id: the index's newest status of every run
    equals `read_runs` (latest_per_run), read in batches of 2 rows."""
    from datetime import UTC, datetime, timedelta

    import pyarrow as pa

    from runner.store import index, index_keys, spill

    ids = [hashlib.sha256(str(i).encode()).hexdigest()[:32] for i in range(5)]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def part(rows: list[tuple[str, str, int | None]]) -> pa.Table:
        finished = [None if s is None else t0 + timedelta(seconds=s) for _, _, s in rows]
        return pa.table(
            {
                "run_id": [r for r, _, _ in rows],
                "status": [s for _, s, _ in rows],
                "finished": pa.array(finished, pa.timestamp("us", tz="UTC")),
                "batch_id": ["b"] * len(rows),
            }
        )

    store = ResultStore(tmp_path)
    store.write_part(
        part([(ids[0], "failed", 1), (ids[1], "ok", 5), (ids[2], "ok", None), ("r-legacy", "ok", 1)]), "runs/task=t"
    )
    store.write_part(
        part([(ids[0], "ok", 2), (ids[1], "failed", 3), (ids[2], "timeout", 1), (ids[3], "pruned", 1)]), "runs/task=t"
    )
    store.write_part(part([(ids[4], "diverged", 4), (ids[0], "timeout", 2)]), "runs/task=t")
    expected = store.read_runs("t", ["status"]).to_pylist()
    monkeypatch.setattr(index_keys, "READ_ROWS", 2)
    newest = {int(r["run_id"][:16], 16): r["status"] for r in expected if r["run_id"] != "r-legacy"}
    assert newest[run_keys(id_array(ids[:1]))[0]] == "ok"  # finished 2 twice: the first read wins, as there
    for limit in ("1000", "3"):  # held in memory, and spilled to range files past 3 rows
        monkeypatch.setenv("CONVGRID_SPILL_ROWS", limit)
        names: list[str] = []
        with index.spill_runs(store, ["t"], names) as runs:
            assert runs.spilled == (limit == "3")
            rows = np.concatenate([index.newest_of(r) for (r,) in spill.matched(runs)])
        assert dict(zip(rows["key"].tolist(), [names[c] for c in rows["code"].tolist()], strict=True)) == newest
        with spill.KeySpill(index.CELL_ROW) as cells:
            cells.add(run_keys(id_array(ids)), index=np.arange(5))
            classified = [(r["index"], f, s) for r, f, s in index.settled_cells(store, ["t"], cells)]
        final = sorted(np.concatenate([i[f] for i, f, _ in classified]).tolist())
        skipped = sorted(np.concatenate([i[s] for i, _, s in classified]).tolist())
        # ids[2]: a timeout beats an ok with no finished time; ids[3] pruned runs again
        assert (final, skipped) == ([0, 1, 4], [2])


def test_a_cache_entry_cut_short_or_of_another_shape_is_computed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    monkeypatch.setenv("CONVGRID_CACHE", str(tmp_path / "cache"))
    ids = load_grid(_grid([0.01, 0.02])).ids.tolist()
    entries = sorted((tmp_path / "cache").glob("*.npy"))
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[:-5])  # cut short: its last id half there
    assert load_grid(_grid([0.01, 0.02])).ids.tolist() == ids
    for entry in entries:
        np.save(entry, np.zeros(3, dtype="S16"))
    assert load_grid(_grid([0.01, 0.02])).ids.tolist() == ids
    assert all(np.load(e).dtype == np.dtype("S32") for e in entries)  # stored again, whole


def test_a_run_asked_for_by_two_blocks_is_one_cell_at_its_first_position() -> None:
    grid = load_grid(
        {
            "blocks": [
                {"task": "least_squares", "product": {"lr": [0.1, 0.2]}},
                {"task": "least_squares", "params": {"lr": 0.2}},  # the second cell of block 0 again
                {"task": "least_squares", "params": {"lr": 0.3}},
            ]
        }
    )
    assert grid.positions_of(np.arange(3)).tolist() == [0, 1, 3] and len(set(grid.ids.tolist())) == len(grid) == 3
    assert [c.params.lr for c in grid.cells_at([0, 1, 2])] == [0.1, 0.2, 0.3]  # type: ignore[attr-defined]
    single = load_grid({"blocks": [{"task": "least_squares", "product": {"lr": [0.1, 0.2]}}]})
    assert single.positions_of(np.arange(2)).tolist() == [0, 1] and not len(single.dropped)
