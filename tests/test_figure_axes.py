"""Every learner's curve figures, read back from the drawn axes (issue 28): the x-axis ends where the
last curve stops changing (no padding after a curve reached its tolerance or floor), a diverged run
is a stub marked where it ends and never sets the y-range, and the legend says what the bands are.

The frames come from real runs of each learner (its small grid, or small configs beside its own
diverging example), built in process as the store's frames are; the axes are checked on what
matplotlib drew (`get_xlim`, `get_ylim`, the lines' data), not on the code that chose them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import analysis
from analysis.figures import drawn, figure_for
from runner import run_grid
from runner.grid.identity import run_id, validate_params
from runner.grid.schema import stored_curve
from runner.grid.spec import load_grid
from tasks import RunContext, get_task
from tests.grid_frames import grid_frames
from tests.options import opts

ROOT = Path(__file__).resolve().parents[1]
VISIBLE = 0.01  # of the axis height: a smaller change is not seen, the curve has stopped changing
MARGIN = 0.05  # of the x-span: room a figure may leave after the last change


def _scaled(values: np.ndarray, ax: Any) -> np.ndarray:
    return np.log10(values) if ax.get_yscale() == "log" else values


def _curves(ax: Any) -> tuple[list[Any], list[Any]]:
    """(median lines, diverged stubs) drawn on `ax`: lines of three points or more in data coordinates
    (reference lines such as axhline are two points in axes coordinates); a stub ends in an x marker."""
    lines = [ln for ln in ax.get_lines() if ln.get_transform() == ax.transData]
    stubs = [ln for ln in lines if ln.get_marker() == "x"]
    return [ln for ln in lines if ln not in stubs and len(ln.get_xdata()) >= 3], stubs


def _band_edges(ax: Any) -> list[tuple[np.ndarray, np.ndarray]]:
    """The lower and upper edges of every band (fill_between's polygons), as (x, y) in x order."""
    edges = []
    for band in ax.collections:
        for path in band.get_paths():
            frame = pd.DataFrame(path.vertices, columns=["x", "y"]).groupby("x")["y"]
            lower, upper = frame.min(), frame.max()
            edges += [(lower.index.to_numpy(), lower.to_numpy()), (upper.index.to_numpy(), upper.to_numpy())]
    return edges


def _shown(x: np.ndarray, y: np.ndarray, ax: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """x, y as the axes show them (clipped to the y-range, on its scale) and the visible change."""
    lo, hi = ax.get_ylim()
    scaled = _scaled(np.clip(np.asarray(y, dtype=float), lo, hi), ax)
    return np.asarray(x, dtype=float), scaled, VISIBLE * float(np.diff(_scaled(np.array([lo, hi]), ax))[0])


def _last_change(x: np.ndarray, y: np.ndarray, ax: Any) -> float:
    """The x after which a drawn curve moves by less than VISIBLE of the axis height."""
    x, y, tol = _shown(x, y, ax)
    moved = np.flatnonzero(np.abs(y - y[-1]) > tol)
    return float(x[min(moved[-1] + 1, x.size - 1)]) if moved.size else float(x[0])


def assert_fitted(ax: Any) -> None:
    """The x-axis ends at the last change of a line or band edge, or the end of a stub (plus MARGIN at
    most), and what lies beyond it is flat; the y-range is the converging lines' own."""
    medians, stubs = _curves(ax)
    assert medians or stubs, "no curve drawn"
    drawn_curves = [(ln.get_xdata(), ln.get_ydata()) for ln in medians] + _band_edges(ax)
    x0, x1 = ax.get_xlim()
    ends = [_last_change(x, y, ax) for x, y in drawn_curves] + [float(ln.get_xdata()[-1]) for ln in stubs]
    assert x1 <= max(ends) + MARGIN * (x1 - x0) + 1e-9, f"x padded: axis to {x1:g}, last change at {max(ends):g}"
    for x, y in drawn_curves:  # nothing cut off: past the axis end each curve is where it ends
        x, y, tol = _shown(x, y, ax)
        assert np.all(np.abs(y[x > x1] - y[-1]) <= tol), f"a curve still changes after x = {x1:g}"
    lo, hi = ax.get_ylim()
    references = [ln for ln in ax.get_lines() if ln.get_transform() != ax.transData]  # axhline: a bound, an optimum
    if medians:
        data = np.concatenate([np.asarray(ln.get_ydata(), dtype=float) for ln in [*medians, *references]])
        data = data[np.isfinite(data) & ((data > 0) if ax.get_yscale() == "log" else True)]
        span = _scaled(np.array([data.min(), data.max()]), ax)
        top = float(_scaled(np.array([hi]), ax)[0])
        # 5% padding of the range of the converging lines and the reference lines
        assert top <= span[1] + 0.5 * max(span[1] - span[0], 1.0), f"y-range to {hi:g}, lines reach {data.max():g}"


def assert_stubs_do_not_set_the_range(ax: Any, peak: float) -> None:
    """A stub per diverged group, labelled so, drawn no higher than the axes, whose top is far below
    `peak`, the largest finite value the diverged runs reached (assert_fitted: the top is the
    converging lines')."""
    medians, stubs = _curves(ax)
    assert stubs and medians, "a diverged stub beside converging lines"
    _, hi = ax.get_ylim()
    for stub in stubs:
        assert "diverged" in stub.get_label()
        assert np.nanmax(np.asarray(stub.get_ydata(), dtype=float)) <= hi * (1 + 1e-9)
    assert hi < peak, f"the diverged runs peak at {peak:g}, inside the axes (to {hi:g}): nothing tested"


def peak_of(runs: pd.DataFrame, curves: pd.DataFrame, columns: Iterable[str]) -> float:
    """The largest finite value of `columns` in the curves of the diverged runs."""
    bad = curves[curves["run_id"].isin(runs.loc[runs["status"] == "diverged", "run_id"])]
    values = bad[list(columns)].to_numpy(dtype=float)
    return float(np.nanmax(np.where(np.isfinite(values), values, np.nan)))


def assert_bands_explained(ax: Any) -> None:
    """The legend says what a line and its band are: a median and IQR over so many seeds (or one run)."""
    legend = ax.get_legend() or ax.figure.legends[0]
    texts = [t.get_text() for t in legend.get_texts()]
    explained = [t for t in texts if ("median" in t and "IQR over" in t and "seeds" in t) or "one run per line" in t]
    assert explained, texts


def frames_of(task_name: str, configs: Iterable[dict[str, Any]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, curves) of `configs` run in process, as the store lays them out (one row per run)."""
    task = get_task(task_name)
    rows, parts = [], []
    for raw in configs:
        params = validate_params(task, raw)
        res = task.run(params, RunContext())
        rid = run_id(task, params)
        rows.append({"run_id": rid, "status": res.status, **params.model_dump(mode="json"), **res.summary})
        parts.append(pd.DataFrame(stored_curve(task_name, res.curve)).assign(run_id=rid))
    return pd.DataFrame(rows), pd.concat(parts, ignore_index=True)


def draw(task: str, grid: str, runs: pd.DataFrame, curves: pd.DataFrame, out: Path) -> list[Any]:
    found = figure_for(task, grid)
    assert found is not None
    with drawn() as figures:
        assert found[1](runs, curves, out)
    return figures


def test_least_squares_step_sweep(tmp_path: Path) -> None:
    """Steps that reach the tolerance stop early (x ends there, not at n_iters = 2000); lr 0.9 diverges
    (to ~1e300 before it is stopped) and is a stub above the axes."""
    grid = {
        "name": "lsq_step_sweep",
        "blocks": [
            {
                "task": "least_squares",
                "params": {"d_in": 6, "m": 24, "cond": 3.0, "n_iters": 2000},
                "product": {"lr": [0.2, 0.3, 0.9]},
                "repeat": 2,
            }
        ],
    }
    run_grid(grid, tmp_path / "store", opts())
    runs = analysis.load(tmp_path / "store", "least_squares")
    curves = analysis.curves(tmp_path / "store", "least_squares", runs=runs)
    assert set(runs["status"]) == {"ok", "diverged"} and runs["n_steps"].max() < 2000
    (fig,) = draw("least_squares", "lsq_step_sweep", runs, curves, tmp_path)
    (ax,) = fig.axes
    assert_fitted(ax)
    assert_stubs_do_not_set_the_range(ax, peak_of(runs, curves, ["err"]))
    assert_bands_explained(ax)
    assert ax.get_xlim()[1] <= 1.05 * runs.loc[runs["status"] == "ok", "n_steps"].max()
    assert "error to the optimum" in ax.get_ylabel()
    # symbols typeset, not plain text (issue 45): eta in the legend, lambda_max/min in the theory step's label
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(r"step $\eta$ = 0.2" in t for t in labels) and not any("η" in t for t in labels), labels
    from analysis.least_squares.figures import _rule

    assert r"$2/(\lambda_{\max} + \lambda_{\min})$" in _rule({"lr_rule": "optimal"})


def test_deep_linear_fig1_gd_diverges_bcgd_stops_at_the_floor(tmp_path: Path) -> None:
    runs, curves = grid_frames(ROOT / "grids" / "deep_linear" / "small" / "fig1_bcgd_vs_gd.yaml")
    assert "diverged" in set(runs["status"])
    (fig,) = draw("deep_linear", "small_fig1_bcgd_vs_gd", runs, curves, tmp_path)
    for ax in fig.axes:
        assert_fitted(ax)
        assert_stubs_do_not_set_the_range(ax, peak_of(runs, curves, ["err"]))
        assert_bands_explained(ax)


def test_deep_linear_fig2_ends_where_the_last_depth_reaches_the_floor(tmp_path: Path) -> None:
    runs, curves = grid_frames(ROOT / "grids" / "deep_linear" / "small" / "fig2_depth.yaml")
    (fig,) = draw("deep_linear", "small_fig2_depth", runs, curves, tmp_path)
    sweeps, iterations, flops = fig.axes
    for ax in fig.axes:
        assert_fitted(ax)
        assert_bands_explained(ax)
    # the paper's floor: every depth reaches 1e-10 well before the grid's n_iters
    n_iters = int(runs["n_iters"].iloc[0])
    floor_at = curves[curves["err"] <= 1e-10].groupby("run_id")["step"].min().max()
    assert iterations.get_xlim()[1] <= 1.05 * floor_at < n_iters


def test_linear_resnet_diverging_standard_net_is_a_stub(tmp_path: Path) -> None:
    """Fig. 1(c) from its small grid, plus one of its cells (the standard net at L = 5) at a step 20x
    too large (c = 10: it blows up to ~1e47 in three steps)."""
    path = ROOT / "grids" / "linear_resnet" / "small" / "fig1c_depth_m40.yaml"
    runs, curves = grid_frames(path)
    cell = next(c.params for c in load_grid(path).cells if c.params.model == "standard" and c.params.depth == 5)
    bad_runs, bad_curves = frames_of("linear_resnet", [{**cell.model_dump(mode="json"), "c": 10.0, "log_every": 1}])
    assert set(bad_runs["status"]) == {"diverged"}
    runs, curves = pd.concat([runs, bad_runs]), pd.concat([curves, bad_curves])
    (fig,) = draw("linear_resnet", "fig1c_depth_m40", runs, curves, tmp_path)
    for ax, column in zip(fig.axes, ["loss", "subopt"], strict=True):
        assert_fitted(ax)
        assert_stubs_do_not_set_the_range(ax, peak_of(runs, curves, [column]))
        assert_bands_explained(ax)


def test_l2o_gd_training_curves(tmp_path: Path) -> None:
    runs, curves = grid_frames(ROOT / "grids" / "l2o_gd" / "small" / "main.yaml")
    figures = draw("l2o_gd", "small_main", runs, curves, tmp_path)
    training = figures[0]
    loss, *ratios = training.axes
    assert_fitted(loss)
    assert_bands_explained(ratios[0])
    for ax in ratios:
        assert_fitted(ax)


def test_ldminv_theorem1_training_loss(tmp_path: Path) -> None:
    """Theorem 1's GD on the coefficients, beside its practice cell (6x6, eta 1) at a step 10x too large:
    it diverges within 6 iterations; every iteration logged."""
    path = ROOT / "grids" / "ldminv" / "small" / "theory_thm1.yaml"
    runs, curves = grid_frames(path)
    cell = load_grid(path).cells[1].params.model_dump(mode="json")
    bad_runs, bad_curves = frames_of("ldminv", [{**cell, "lr": 10.0, "log_every": 1}])
    assert set(bad_runs["status"]) == {"diverged"}
    runs, curves = pd.concat([runs, bad_runs]), pd.concat([curves, bad_curves])
    (fig,) = draw("ldminv", "theory_thm1", runs, curves, tmp_path)
    (ax,) = fig.axes
    assert_fitted(ax)
    assert_stubs_do_not_set_the_range(ax, peak_of(runs, curves, ["train_loss"]))
    assert_bands_explained(ax)


def test_hierarchical_feature_error_along_training(tmp_path: Path) -> None:
    """C2's panel (the layer-2 feature error along epochs) on small configs, joint and layer-wise over
    two seeds, and the task's diverging example, which must not set the range."""
    task = get_task("hierarchical")
    small = {**task.examples[0], "n_mc": 1000, "n_train": 200, "n_val": 50, "n_test": 100, "final_epochs": 1}
    cells = [
        {**small, "protocol": protocol, "seed": seed, "gamma": 0.3}
        for protocol in ("joint", "layerwise")
        for seed in (0, 1)
    ]
    runs, curves = frames_of("hierarchical", [*cells, {**task.diverging_example, "gamma": 0.3}])
    assert "diverged" in set(runs["status"])
    (fig,) = draw("hierarchical", "c1_joint_vs_layerwise", runs, curves, tmp_path)
    features = fig.axes[1]  # row 2: C2
    assert_fitted(features)
    assert_bands_explained(features)
