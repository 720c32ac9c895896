"""deep_linear: every grid file validates; the small grids and the demo run fast, show the paper's
qualitative claims in miniature, and draw their figures from frames built from real runs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pydantic
import pytest

import analysis.deep_linear.figures as figs
from runner.grid.spec import load_grid
from tasks.base import RunContext
from tasks.deep_linear.task import DeepLinearTask

ROOT = Path(__file__).resolve().parents[1]
GRIDS = sorted((ROOT / "grids" / "deep_linear").rglob("*.yaml"))
TASK = DeepLinearTask()
ADAPTER = pydantic.TypeAdapter(TASK.Params)
REAL = ("fig7", "fig8", "fig9")


def expand(path: Path) -> tuple[str, list[dict]]:
    """The shipped grid file as the runner reads it (its own loader: validation and all)."""
    grid = load_grid(path)
    assert grid.tasks() == ["deep_linear"]
    return grid.name, [c.params_json() for c in grid.cells]


@pytest.mark.parametrize("path", GRIDS, ids=[str(p.relative_to(ROOT / "grids")) for p in GRIDS])
def test_grid_validates_and_has_a_figure(path):
    name, configs = expand(path)
    assert name in figs.FIGURES
    ids = set()
    for cfg in configs:
        p = ADAPTER.validate_python(cfg)
        ids.add(p.model_dump_json())
    assert len(ids) == len(configs)  # no duplicate cells


def run_grid(path: Path):
    name, configs = expand(path)
    items = []
    for k, cfg in enumerate(configs):
        p = ADAPTER.validate_python(cfg)
        items.append((f"r{k}", p, TASK.run(p, RunContext())))
    return name, figs.frames_from_results(items)


SMALL = [p for p in GRIDS if p.parent.name == "small" and not p.stem.startswith(REAL)]


@pytest.mark.parametrize("path", SMALL, ids=[p.stem for p in SMALL])
def test_small_grid_runs_and_draws(path, tmp_path):
    name, (runs, curves) = run_grid(path)
    out = figs.FIGURES[name](runs, curves, tmp_path)
    assert out and all(p.exists() and p.stat().st_size > 5000 for p in out)
    check = CLAIMS.get(name)
    if check:
        check(runs)


def claims_fig2(runs):
    """Per sweep deeper is faster; per iteration depth 1 is fastest (Fig. 2)."""
    t = figs.median_table(runs, ["L"], ["sweeps_to_tol", "iters_to_tol"]).sort_values("L")
    assert t["sweeps_to_tol"].is_monotonic_decreasing
    assert t["iters_to_tol"].iloc[0] == t["iters_to_tol"].min()


def claims_fig3(runs):
    """Ill-conditioned X: depth beats depth 1 per iteration (Fig. 3)."""
    t = figs.median_table(runs, ["L"], ["err_final"]).set_index("L")["err_final"]
    assert t.loc[3] < 1e-2 * t.loc[1] and t.loc[5] < 1e-2 * t.loc[1]


def claims_fig1(runs):
    """BCGD beats every GD step per iteration; the Du-Hu step diverges."""
    bc = runs[runs.algo == "bcgd"]["err_final"].max()
    gd = runs[(runs.algo == "gd") & (runs.status == "ok")]["err_final"].min()
    assert bc < 1e-6 * gd
    assert (runs[runs.lr_rule == "du_hu"]["status"] == "diverged").all()


def claims_fig5(runs):
    """A narrow layer stalls training: all-narrow > one-narrow > wide (Fig. 5)."""
    arch = [("one" if isinstance(ws, list) else int(w)) for ws, w in zip(runs["widths"], runs["width"], strict=True)]
    err = runs.set_index(pd.Index(arch))["err_final"]
    assert err.loc[32] < err.loc["one"] < err.loc[8]


def claims_fig6(runs):
    """With orth-identity: ascending when d_out > d_in, descending when d_in > d_out (Fig. 6)."""
    oi = runs[runs.init == "orth_identity"].set_index(["d_in", "order"])["err_final"]
    assert oi.loc[(8, "asc")] < oi.loc[(8, "desc")] and oi.loc[(32, "desc")] < oi.loc[(32, "asc")]


CLAIMS = {
    "small_fig2_depth": claims_fig2,
    "small_fig3_depth_illcond": claims_fig3,
    "small_fig1_bcgd_vs_gd": claims_fig1,
    "small_fig4_bcgd_vs_gd": None,
    "small_fig5_width": claims_fig5,
    "small_fig6_order_init": claims_fig6,
}


def test_demo_depth_runs_and_plots(tmp_path):
    name, (runs, curves) = run_grid(ROOT / "grids" / "deep_linear" / "demo_depth.yaml")
    assert len(runs) == 10 and (runs.status == "ok").all()
    assert figs.FIGURES[name](runs, curves, tmp_path)[0].exists()
