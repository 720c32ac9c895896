"""Grid files of linear_resnet validate cell by cell, and every figure draws from frames built by
actually running the task on the small grids (the store's runs/curves layout, no hand-made numbers)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pydantic import TypeAdapter

from analysis.linear_resnet.figures import FIGURES
from runner.grid.spec import load_grid
from tasks.linear_resnet.task import LinearResNetTask
from tests.grid_frames import grid_frames

ROOT = Path(__file__).resolve().parents[1]
GRIDS = ROOT / "grids" / "linear_resnet"
TASK = LinearResNetTask()
ADAPTER = TypeAdapter(TASK.Params)


def expand(path: Path) -> Iterator[Any]:
    """The shipped grid file as the runner reads it (its own loader), cell by cell."""
    grid = load_grid(path)
    assert grid.tasks() == ["linear_resnet"]
    for cell in grid.cells:
        yield cell.params


def frames(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """runs (one row per run: run_id, status, params, summary, flops, n_steps, wall_s) and curves."""
    return grid_frames(path)


def grid_name(path: Path) -> str:
    return load_grid(path).name


ALL = sorted(GRIDS.rglob("*.yaml"))
SMALL = sorted((GRIDS / "small").glob("*.yaml"))


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(GRIDS)))
def test_grid_validates(path: Path) -> None:
    cells = list(expand(path))
    assert cells
    name = grid_name(path)
    assert name == (f"small_{path.stem}" if path.parent.name == "small" else path.stem)
    assert name in FIGURES


def test_every_full_grid_has_a_small_twin_and_a_figure() -> None:
    full = {p.stem for p in GRIDS.glob("*.yaml")}
    assert full == {p.stem for p in SMALL}
    assert {"fig1a_transforms_m40", "fig1b_transforms_m200", "fig1c_depth_m40", "fig1d_depth_m200"} <= full
    assert set(FIGURES) == {grid_name(p) for p in ALL}


@pytest.fixture(scope="module")
def small_frames() -> dict[str, tuple[pd.DataFrame, pd.DataFrame, float]]:
    out = {}
    for path in SMALL:
        t0 = time.perf_counter()
        runs, curves = frames(path)
        out[grid_name(path)] = (runs, curves, time.perf_counter() - t0)
    return out


@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.stem)
def test_small_grid_runs_and_draws(path: Path, small_frames: dict, tmp_path: Path) -> None:
    name = grid_name(path)
    runs, curves, _seconds = small_frames[name]
    assert set(runs["status"]) == {"ok"}
    assert {"run_id", "flops", "n_steps", "wall_s", "iters_rel_1e6", "transform", "depth"} <= set(runs.columns)
    assert set(curves["run_id"]) == set(runs["run_id"])
    written = FIGURES[name](runs, curves, tmp_path)
    assert written and all(p.suffix == ".png" and p.stat().st_size > 10_000 for p in written)
    assert all(p.parent == tmp_path for p in written)


def test_figures_skip_unfinished_runs(small_frames: dict, tmp_path: Path) -> None:
    runs, curves, _ = small_frames["small_fig1a_transforms_m40"]
    assert FIGURES["small_fig1a_transforms_m40"](runs.assign(status="pruned"), curves, tmp_path) == []
