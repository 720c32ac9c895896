"""The executors' batched path: which cells of a chunk form batches, and a batched grid stores what the
unbatched one does (run ids, rows, curves; all but the timing and host columns)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from runner import ResultStore, run_grid
from runner.cli.options import add_execution_options, execution_options
from runner.execute.base import BatchPolicy, WorkItem
from runner.execute.batching import batch_key, plan_groups
from runner.execute.local import LocalExecutor
from runner.execute.worker import run_item, run_items
from runner.grid.spec import load_grid
from tasks.deep_linear.task import DeepLinearTask
from tests.options import opts

SHAPE = {"d_in": 6, "d_out": 3, "m": 20, "L": 3, "width": 6, "n_iters": 30, "log_every": 4}
ORDERS = ["desc", "asc"]
GRID = {
    "name": "batched",
    "blocks": [
        {"task": "deep_linear", "params": {**SHAPE, "algo": "gd"}, "product": {"lr": [0.02, 0.2, 5.0]}, "repeat": 3},
        {"task": "deep_linear", "params": {**SHAPE, "algo": "bcgd"}, "product": {"order": ORDERS}, "repeat": 2},
        {"task": "deep_linear", "params": {**SHAPE, "algo": "bcsgd"}, "repeat": 2},  # no batched path
        {"task": "least_squares", "params": {"d_in": 5, "m": 12, "n_iters": 25}, "product": {"lr": [0.1, 9.0]}},
    ],
}
TIMING = ["batch_id", "commit_seq", "wall_s", "started", "finished", "host"]  # when and where, not what


def _items(grid: dict[str, Any]) -> list[WorkItem]:
    return [WorkItem(c.run_id, c.task, c.params_json()) for c in load_grid(grid).cells]


def _frames(root: Path, task: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    store = ResultStore(root)
    runs = store.read_runs(task).to_pandas().drop(columns=TIMING).sort_values("run_id").reset_index(drop=True)
    curves = store.read_curves(task).to_pandas()
    return runs, curves.sort_values(["run_id", "step"]).reset_index(drop=True)


def test_a_batched_grid_stores_exactly_what_the_unbatched_grid_stores(tmp_path: Path, monkeypatch) -> None:
    calls: list[int] = []
    real = DeepLinearTask.run_batch

    def spy(self: DeepLinearTask, ps: Any, ctxs: Any) -> Any:
        calls.append(len(ps))
        return real(self, ps, ctxs)

    monkeypatch.setattr(DeepLinearTask, "run_batch", spy)
    # The default, shared run: its claimed blocks (8 cells each here) feed one execute call lazily, so a batch
    # spans blocks and waves (one execute call per wave cut the 9 GD cells into 8 + 1)
    batched = run_grid(GRID, tmp_path / "batched", opts(), executor=LocalExecutor())
    assert sorted(calls) == [2, 2, 9]  # the 9 GD cells, and BCGD in two orders (different keys), 2 seeds each
    calls.clear()
    single = run_grid(GRID, tmp_path / "single", opts(), executor=LocalExecutor(batch=False), share=False)
    assert calls == []
    assert batched.counts == single.counts and batched.executed == single.executed == 17
    for task in ("deep_linear", "least_squares"):
        runs_b, curves_b = _frames(tmp_path / "batched", task)
        runs_s, curves_s = _frames(tmp_path / "single", task)
        pd.testing.assert_frame_equal(runs_b, runs_s, check_exact=True)
        pd.testing.assert_frame_equal(curves_b, curves_s, check_exact=True)
    runs = ResultStore(tmp_path / "batched").read_runs("deep_linear").to_pandas()
    assert set(runs["status"]) == {"ok", "diverged"} and runs["gpu_name"].isna().all()
    # a member's wall_s is its share of its batch: equal within a batch
    gd = runs[runs["algo"] == "gd"]
    assert gd["wall_s"].nunique() == 1 and gd["wall_s"].iloc[0] > 0


def test_a_chunk_is_grouped_by_key_within_the_size_and_memory_caps() -> None:
    items = _items(GRID)  # 9 gd, 2 bcgd desc, 2 bcgd asc, 2 bcsgd, 2 least_squares
    bad = WorkItem("bad", "deep_linear", {"algo": "gd", "lr": -1.0})  # fails validation: runs (and fails) alone

    def sizes(policy: BatchPolicy, work: list[WorkItem]) -> list[int]:
        groups = list(plan_groups(work, policy, "cpu"))
        assert sorted(i.run_id for g in groups for i in g.items) == sorted(i.run_id for i in work)
        return [len(g.items) for g in groups]

    assert sizes(BatchPolicy(), [*items, bad]) == [9, 2, 2, 1, 1, 2, 1]
    assert sizes(BatchPolicy(max_size=4), [*items, bad]) == [4, 4, 1, 2, 2, 1, 1, 2, 1]
    one = DeepLinearTask().batch_bytes(_validated(items[0]))
    assert sizes(BatchPolicy(budget_bytes=3 * one), items)[:3] == [3, 3, 3]
    assert sizes(BatchPolicy(enabled=False), items) == [1] * len(items)
    # equal keys need not be adjacent in the chunk: a key's first appearance places its batch
    assert sizes(BatchPolicy(), [*items[:3], items[9], *items[3:9]]) == [9, 1]
    assert batch_key(bad) is None and batch_key(items[0]) == batch_key(items[8]) != batch_key(items[9])


def test_is_batchable_agrees_with_the_protocol_for_every_learner() -> None:
    from tasks.base import BatchableTask, is_batchable
    from tasks.registry import get_task, task_names

    verdicts = {name: is_batchable(get_task(name)) for name in task_names()}
    assert verdicts == {name: isinstance(get_task(name), BatchableTask) for name in task_names()}
    assert verdicts["deep_linear"] and not verdicts["hierarchical"]  # one of each, so neither side is vacuous
    assert is_batchable(get_task("deep_linear"))  # asked again: the class's cached answer


def _validated(item: WorkItem) -> Any:
    from runner.grid.identity import validate_params

    return validate_params(DeepLinearTask(), item.params)


def test_a_batch_that_raises_runs_its_members_alone(monkeypatch) -> None:
    items = _items({"blocks": [GRID["blocks"][0]]})

    def broken(self: DeepLinearTask, ps: Any, ctxs: Any) -> Any:
        raise RuntimeError("batched path broken")

    monkeypatch.setattr(DeepLinearTask, "run_batch", broken)
    records = list(run_items(items))
    alone = [run_item(i) for i in items]
    assert [r.row["status"] for r in records] == [r.row["status"] for r in alone]
    for got, want in zip(records, alone, strict=True):  # repr: NaN equals NaN, floats compare exactly
        assert repr(_untimed(got.row)) == repr(_untimed(want.row)) and repr(got.curve) == repr(want.curve)


def _untimed(row: dict[str, Any]) -> list[tuple[str, Any]]:
    return sorted((k, v) for k, v in row.items() if k not in TIMING)


def test_no_batch_option_reaches_the_executor() -> None:
    parser = argparse.ArgumentParser()
    add_execution_options(parser)
    assert execution_options(parser.parse_args(["--no-batch"])).batch is False
    assert execution_options(parser.parse_args([])).batch is True
    assert execution_options(parser.parse_args(["--gpus-per-worker", "0.25"])).gpus_per_worker == 0.25
    with pytest.raises(SystemExit):
        parser.parse_args(["--gpus-per-worker", "0"])
