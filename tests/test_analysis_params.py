"""`analysis` groups by any param of any learner (issue 28): `curve_band`, `over_seeds` and the figures'
`seed_lines` take every param of every task as a group key, including a list param (deep_linear's
`widths`) and a param whose curve field has its name (deep_linear's `lr`, `loss`; ldminv's `lr`: the
curve column is `lr_t`, runner.store.columns), whose merge used to collide (`curve_band(curves, runs,
by=["lr"], ...)` raised KeyError: 'lr').

The frames have the store's exact column types: tables built on each task's own Arrow schemas (the
ones its writers use) and read back with pyarrow's `to_pandas`, as `analysis.load` does. Every
statistic is compared with numpy on the same values.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import analysis
from analysis.aggregate import stat_names
from analysis.curve_plot import seed_lines
from runner.grid.schema import param_columns, task_schemas
from tasks import get_task
from tasks.registry import builtin_task_names

SEEDS = 3  # runs per group
STEPS = 5


def _value(typ: pa.DataType, group: int) -> Any:
    """A value of Arrow type `typ` that differs between group 0 and group 1."""
    if pa.types.is_list(typ):
        inner = _value(typ.value_type, group)
        return [inner] * (group + 1)
    if pa.types.is_boolean(typ):
        return bool(group)
    if pa.types.is_integer(typ):
        return 3 + group
    if pa.types.is_floating(typ):
        return 0.5 + group
    if pa.types.is_string(typ):
        return f"v{group}"
    raise AssertionError(f"a param of type {typ}: extend _value")


def frames(task_name: str) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(runs, curves, param names) of 2 x SEEDS runs: the first SEEDS in group 0 of every param, the
    rest in group 1; summary and curve values drawn at random."""
    runs_schema, curves_schema = task_schemas(task_name)
    params = [f.name for f in param_columns(get_task(task_name))]
    rng = np.random.default_rng(0)
    rows, curve_rows = [], []
    for i in range(2 * SEEDS):
        group = i // SEEDS
        row: dict[str, Any] = {f.name: None for f in runs_schema}
        row.update(run_id=f"r{i}", version="1", status="ok", batch_id=f"b{i}", params_json="{}")
        row.update({name: _value(runs_schema.field(name).type, group) for name in params})
        for f in runs_schema:
            if f.name not in params and pa.types.is_floating(f.type):
                row[f.name] = float(rng.normal())
        rows.append(row)
        for step in range(STEPS):
            curve: dict[str, Any] = {f.name: None for f in curves_schema}
            curve.update(run_id=f"r{i}", batch_id=f"b{i}", step=step)
            for f in curves_schema:
                if pa.types.is_floating(f.type):
                    curve[f.name] = float(rng.lognormal())
            curve_rows.append(curve)
    runs = pa.Table.from_pylist(rows, schema=runs_schema).to_pandas()
    curves = pa.Table.from_pylist(curve_rows, schema=curves_schema).to_pandas()
    return runs, curves, params


def _float_columns(schema: pa.Schema, skip: set[str]) -> list[str]:
    return [f.name for f in schema if pa.types.is_floating(f.type) and f.name not in skip]


@pytest.mark.parametrize("task_name", builtin_task_names())
def test_every_param_groups_curves_and_summaries(task_name: str) -> None:
    runs, curves, params = frames(task_name)
    runs_schema, curves_schema = task_schemas(task_name)
    curve_cols = _float_columns(curves_schema, set())
    # the first curve column, and every curve column of a field named like a param (the old collision)
    ys = list(dict.fromkeys([curve_cols[0], *(c for c in curve_cols if c.removesuffix("_t") in params)]))
    value = _float_columns(runs_schema, set(params))[0]
    groups = [runs["run_id"].iloc[:SEEDS].tolist(), runs["run_id"].iloc[SEEDS:].tolist()]
    assert len(params) >= 3
    for param in params:
        for y in ys:
            band = analysis.curve_band(curves, runs, [param], "step", y)
            n = stat_names([param])["n"]  # "n_stat" where the param is linear_resnet's n
            assert len(band) == 2 * STEPS and list(band.columns[:2]) == [param, "step"], (param, y)
            for g, ids in enumerate(groups):
                mine = band.iloc[g * STEPS : (g + 1) * STEPS]
                values = curves[curves["run_id"].isin(ids)].pivot(index="step", columns="run_id", values=y)
                assert np.allclose(mine["median"], np.median(values.to_numpy(), axis=1)), (param, y)
                assert np.allclose(mine["q25"], np.quantile(values.to_numpy(), 0.25, axis=1)), (param, y)
                assert (mine[n] == SEEDS).all()
            lines = seed_lines(runs, curves, [param], y)
            assert [ln.seeds for ln in lines] == [SEEDS, SEEDS] and not any(ln.diverged for ln in lines)
            assert np.allclose(lines[0].y, band.iloc[:STEPS]["median"])
        stats = analysis.over_seeds(runs, [param], value)
        assert len(stats) == 2, param
        for g, ids in enumerate(groups):
            expected = runs.loc[runs["run_id"].isin(ids), value].to_numpy()
            assert stats["median"].iloc[g] == pytest.approx(np.median(expected)), param
            assert stats["mean"].iloc[g] == pytest.approx(expected.mean()), param


def test_a_param_named_like_the_curve_column_it_groups() -> None:
    """deep_linear's run `lr` (the GD step asked for) and curve `lr_t` (the step taken at each
    iteration) are different columns; grouping by the first and drawing the second is allowed."""
    runs, curves, _ = frames("deep_linear")
    band = analysis.curve_band(curves, runs, ["lr", "widths"], "step", "lr_t")
    assert set(band["lr"]) == {0.5, 1.5}  # the run param's two values
    assert set(band["widths"]) == {(3,), (4, 4)}  # a list param, grouped as tuples
    with pytest.raises(ValueError, match="x 'step' is also a group key"):
        analysis.curve_band(curves, runs, ["step"], "step", "err")
