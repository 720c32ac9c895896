"""A task's curves and runs join on run_id with no other column in common, and "never reached" is null
(issue 28, item 4).

The rule (runner.store.columns.curve_column): a curve field named like a column of the task's runs is
stored as `<name>_t`, its value at step t. Checked on a store of all six learners through convgrid's
reader and plain pandas; a store written before the rule reads under the new names and is rewritten by
the next flush or compact. Thresholds never reached (`iters_to_tol`, linear_resnet's `iters_rel_*`)
are null, in a single run and in a batch, and count as +inf in medians (as -1 from older stores does).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import Field

import analysis
from analysis.aggregate import medians
from runner import ResultStore, run_grid
from runner.cli import main
from runner.grid.identity import validate_params
from runner.grid.schema import curve_columns, task_schemas
from tasks import RunContext, get_task
from tasks.base import FieldType, TaskParams
from tasks.registry import builtin_task_names
from tests.options import opts

SHAPE = {"d_in": 8, "d_out": 2, "m": 30}
NEVER = {"deep_linear": "iters_to_tol", "least_squares": "iters_to_tol", "ldminv": "iters_to_tol"}
NEVER_RESNET = ("iters_rel_1e2", "iters_rel_1e4", "iters_rel_1e6")


def _grid() -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"task": t, "params": get_task(t).examples[0]} for t in builtin_task_names()]
    blocks += [
        {
            "task": "deep_linear",
            "params": {**SHAPE, "algo": "gd", "L": 2, "n_iters": 20},
            "product": {"lr": [0.02, 0.05], "seed": [0, 1]},
        },
        {
            "task": "least_squares",
            "params": {**SHAPE, "lr_rule": "optimal", "n_iters": 400},
            "product": {"seed": [0, 1]},
        },
        {"task": "least_squares", "params": {**SHAPE, "lr": 0.1, "n_iters": 5}, "product": {"seed": [0, 1]}},
    ]
    return {"name": "six", "blocks": blocks}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("six")
    report = run_grid(_grid(), path, opts())
    assert set(report.counts) == {"ok"}, report.counts
    return path


@pytest.mark.parametrize("task", builtin_task_names())
def test_curves_and_runs_share_run_id_alone(root: Path, task: str) -> None:
    runs = analysis.load(root, task)
    curves = analysis.curves(root, task, runs)
    assert len(curves) and set(curves.columns) & set(runs.columns) == {"run_id"}
    plain_runs = pd.read_parquet(root / "runs" / f"task={task}")
    plain_curves = pd.read_parquet(root / "curves" / f"task={task}")
    assert set(plain_curves.columns) & set(plain_runs.columns) == {"run_id"}
    merged = plain_curves.merge(plain_runs, on="run_id")  # no suffixes: every column keeps its name
    assert set(merged.columns) == set(plain_curves.columns) | set(plain_runs.columns)
    assert len(merged) == len(plain_curves)
    stored = curve_columns(get_task(task))  # every curve field is there, under the store's name
    assert list(plain_curves.columns) == ["run_id", "step", *stored.values()]
    renamed = {v for k, v in stored.items() if k != v}
    assert all(c.removesuffix("_t") in plain_runs.columns for c in renamed)


def test_curve_band_groups_by_a_param_whose_curve_field_has_its_name(root: Path) -> None:
    """deep_linear's run `lr` (the GD step asked for) groups; its curve `lr_t` (the step taken at each
    iteration) is drawn: constant GD takes the step it was asked for at every iteration after 0."""
    runs = analysis.load(root, "deep_linear", filters={"algo": "gd"})
    curves = analysis.curves(root, "deep_linear", runs)
    band = analysis.curve_band(curves, runs, by=["lr"], x="step", y="lr_t")
    taken = band[band["step"] > 0]
    assert set(taken["lr"]) == {0.02, 0.05} and (taken["n"] == 2).all()
    assert np.array_equal(taken["median"].to_numpy(), taken["lr"].to_numpy())
    err = analysis.curve_band(curves, runs, by=["lr"], x="step", y="err")
    assert set(err["lr"]) == {0.02, 0.05} and err.groupby("lr")["step"].max().eq(20).all()


def test_never_reached_is_null_in_the_store_and_inf_in_medians(root: Path) -> None:
    runs = analysis.load(root, "least_squares", filters={"d_in": 8, "n_iters": [5, 400]})
    assert isinstance(runs["iters_to_tol"].dtype, pd.Int64Dtype)  # an integer column, nullable
    short = runs[runs["n_iters"] == 5]
    assert len(short) == 2 and short["iters_to_tol"].isna().all()
    reached = runs.loc[runs["n_iters"] == 400, "iters_to_tol"]
    assert len(reached) == 2 and reached.notna().all() and (reached > 0).all()
    med = medians(runs, ["n_iters"], "iters_to_tol")
    assert med[5] == np.inf and med[400] == float(reached.median())
    for part in (root / "runs" / "task=least_squares").glob("*.parquet"):
        column = pq.read_table(part, columns=["iters_to_tol"])["iters_to_tol"]
        assert pa.types.is_int64(column.type) and -1 not in column.to_pylist()
    # -1 from a store written before still counts as never reached
    old = pd.DataFrame({"g": [0, 0, 0], "iters_to_tol": [3, -1, -1]})
    assert medians(old, ["g"], "iters_to_tol")[0] == np.inf


def _never_configs() -> dict[str, dict[str, Any]]:
    return {
        "deep_linear": {**SHAPE, "algo": "gd", "L": 2, "lr": 0.05, "n_iters": 20},
        "least_squares": {**SHAPE, "lr": 0.1, "n_iters": 5},
        "ldminv": get_task("ldminv").examples[0],
        "linear_resnet": {**get_task("linear_resnet").examples[0], "n_iters": 3},
    }


@pytest.mark.parametrize("task_name", ["deep_linear", "least_squares", "ldminv", "linear_resnet"])
def test_a_run_that_never_reaches_its_threshold_says_none_alone_and_in_a_batch(task_name: str) -> None:
    task = get_task(task_name)
    config = _never_configs()[task_name]
    columns = NEVER_RESNET if task_name == "linear_resnet" else (NEVER[task_name],)
    alone = task.run(validate_params(task, config), RunContext())
    members = [validate_params(task, {**config, "seed": s}) for s in (1, 2)]
    batch = task.run_batch(members, [RunContext(), RunContext()])
    for result in [alone, *batch]:
        assert result.status == "ok"
        assert all(result.summary[c] is None for c in columns), {c: result.summary[c] for c in columns}


def _to_legacy(root: Path, task: str, folder: str = "curves") -> dict[str, str]:
    """Rewrite the task's curve parts as a store from before the rule wrote them: each renamed field
    under its own name (a part named as old stores named them). Returns the renames undone."""
    renamed = {v: k for k, v in curve_columns(get_task(task)).items() if k != v}
    for i, part in enumerate(sorted((root / folder / f"task={task}").glob("*.parquet"))):
        table = pq.read_table(part)
        table = table.rename_columns([renamed.get(c, c) for c in table.column_names])
        pq.write_table(table, part.parent / f"part-000{i}-legacy.parquet")
        part.unlink()
    return renamed


def _curve_columns_in_files(root: Path, task: str) -> set[str]:
    return {c for part in (root / "curves" / f"task={task}").glob("*.parquet") for c in pq.read_schema(part).names}


def test_a_store_from_before_the_rule_reads_under_the_new_names_and_is_rewritten(root: Path, tmp_path: Path) -> None:
    shutil.copytree(root, tmp_path / "s")
    path = tmp_path / "s"
    before = ResultStore(path).read_curves("deep_linear").to_pandas()
    renamed = _to_legacy(path, "deep_linear")
    assert set(renamed) == {"flops_t", "loss_t", "lr_t"} and {"flops", "loss", "lr"} <= _curve_columns_in_files(
        path, "deep_linear"
    )
    store = ResultStore(path)
    pd.testing.assert_frame_equal(store.read_curves("deep_linear").to_pandas(), before)
    picked = store.read_curves("deep_linear", columns=["lr_t"]).to_pandas()
    assert list(picked.columns) == ["run_id", "step", "lr_t"]
    pd.testing.assert_series_equal(picked["lr_t"], before["lr_t"])
    with pytest.raises(ValueError, match="'lr' \\(the curve's is 'lr_t'\\)"):
        store.read_curves("deep_linear", columns=["lr"])
    runs = analysis.load(path, "deep_linear")
    assert set(analysis.curves(path, "deep_linear", runs).columns) & set(runs.columns) == {"run_id"}

    # the next flush of the task rewrites the legacy parts under the new names, values kept
    more = {"name": "more", "blocks": [{"task": "deep_linear", "params": {**SHAPE, "algo": "gd", "lr": 0.03}}]}
    assert set(run_grid(more, path, opts()).counts) == {"ok"}
    assert not {"flops", "loss", "lr"} & _curve_columns_in_files(path, "deep_linear")
    after = ResultStore(path).read_curves("deep_linear").to_pandas()
    kept = after[after["run_id"].isin(before["run_id"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, before)


def test_compact_rewrites_a_store_from_before_the_rule(root: Path, tmp_path: Path) -> None:
    shutil.copytree(root, tmp_path / "s")
    path = tmp_path / "s"
    assert main(["compact", str(path)]) == 0  # first: one curves part per task
    before = ResultStore(path).read_curves("l2o_gd").to_pandas()
    _to_legacy(path, "l2o_gd")
    assert len(list((path / "curves" / "task=l2o_gd").glob("*.parquet"))) == 1
    assert main(["compact", str(path)]) == 0  # one part in, the same rows out: rewritten for the names
    assert {"imp_last_t", "imp_mean_t", "w_ratio_max_t"} <= _curve_columns_in_files(path, "l2o_gd")
    assert not {"imp_last", "imp_mean", "w_ratio_max"} & _curve_columns_in_files(path, "l2o_gd")
    pd.testing.assert_frame_equal(ResultStore(path).read_curves("l2o_gd").to_pandas(), before)


class _Params(TaskParams):
    lr: float = Field(0.1, gt=0, description="step")


class _Task:
    name: ClassVar[str] = "named_alike"
    version: ClassVar[str] = "1"
    Params: ClassVar[Any] = _Params
    summary_fields: ClassVar[dict[str, FieldType]] = {"loss": "float"}
    curve_fields: ClassVar[dict[str, FieldType]] = {"loss": "float", "lr": "float", "err": "float"}


class _Clashing(_Task):
    name: ClassVar[str] = "clashing"
    curve_fields: ClassVar[dict[str, FieldType]] = {"lr": "float", "lr_t": "float"}


def test_the_rule_names_every_curve_field_apart_from_the_runs_columns() -> None:
    assert curve_columns(_Task()) == {"loss": "loss_t", "lr": "lr_t", "err": "err"}  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="clashing: curve fields clash .*'lr_t'"):
        curve_columns(_Clashing())  # type: ignore[arg-type]
    for name in builtin_task_names():
        runs_schema, curves_schema = task_schemas(name)
        assert set(runs_schema.names) & set(curves_schema.names) == {"run_id"}, name
