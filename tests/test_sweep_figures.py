"""Figures for any grid (issue 45): `convgrid report` on a grid of the user's own, across a built-in
learner and one outside the repository (tests.toy_learner, `faulty`), draws every curve field against
its step (a line per combination of the swept params, small multiples past seven), every summary
field against each swept param and, for three swept params or more, a parallel-coordinates view; the
grid file's description heads its section. Checked on what matplotlib drew (`analysis.figures.drawn`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis.figures import drawn
from analysis.report import build_report
from analysis.sweep_figures import _derived, declared_axes, headline, sweep_of
from runner import run_grid
from tests.options import opts

DESCRIPTION = "A user's own sweep: least squares over step, conditioning and samples; the toy learner over x."
GRID = {
    "name": "mine",
    "description": DESCRIPTION,
    "blocks": [
        {
            "task": "least_squares",
            "params": {"d_in": 4, "d_out": 2, "n_iters": 300},
            "product": {"lr": [0.01, 0.1, 9.0], "cond": [3.0, 30.0], "m": [12, 24]},  # lr 9 diverges
            "repeat": 2,
        },
        {"task": "faulty", "product": {"x": [1.0, 2.0, 3.0]}},
    ],
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    root = tmp_path_factory.mktemp("mine")
    grid_file = root.parent / "mine.yaml"
    grid_file.write_text(yaml.safe_dump(GRID, sort_keys=False))
    run_grid(str(grid_file), root, opts())
    out = tmp_path_factory.mktemp("report")
    with drawn() as figures:
        build_report(str(root), out)
    return out, figures


def _named(figures: list[Any], text: str) -> list[Any]:
    return [f for f in figures if f.get_suptitle().endswith(text) or any(text in a.get_title() for a in f.axes)]


def test_every_section_is_drawn_and_described(report: tuple[Path, list[Any]]) -> None:
    out, _ = report
    md = (out / "report.md").read_text()
    assert "No figure module" not in md
    assert md.count(f"*{DESCRIPTION}*") == 2  # both sections of the grid (one per learner)
    faulty = md[md.index("## mine (faulty)") :]
    assert "curve_value.png" in faulty and "summary_1.png" in faulty  # the external learner's fields
    assert "Swept: x (3 values)" in faulty


def test_curves_one_line_per_combination_in_small_multiples(report: tuple[Path, list[Any]]) -> None:
    _, figures = report
    (fig,) = [f for f in figures if f.get_suptitle() == "mine (least_squares): loss against step"]
    panels = [ax for ax in fig.axes if ax.get_visible()]
    # 3 x 2 x 2 = 12 combinations > 7: one panel per lr (the facet leaving the fewest lines), 4 lines each
    assert sorted(ax.get_title() for ax in panels) == ["lr = 0.01", "lr = 0.1", "lr = 9"]
    legends = [ax.get_legend() for ax in panels if ax.get_legend()]
    assert len(legends) == 1  # the panels draw the same lines: one legend, saying what a line and band are
    assert any("median" in t.get_text() for t in legends[0].get_texts())
    for ax in panels:
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        keys = {ln.get_label().split(": diverged")[0] for ln in lines}
        assert keys == {f"cond = {c:g}, m = {m}" for c in (3.0, 30.0) for m in (12, 24)}, keys
    (lr_big,) = [ax for ax in panels if ax.get_title() == "lr = 9"]
    stubs = [ln for ln in lr_big.get_lines() if ln.get_marker() == "x"]
    assert stubs and all("diverged (2 of 2 seeds)" in ln.get_label() for ln in stubs)


def test_summary_fields_against_each_swept_param(report: tuple[Path, list[Any]]) -> None:
    _, figures = report
    pages = [f for f in figures if "mine (least_squares): summary fields" in f.get_suptitle()]
    assert pages
    xlabels = [ax.get_xlabel() for f in pages for ax in f.axes]
    rows = len(xlabels) // 3
    assert xlabels == ["lr", "cond", "m"] * rows  # one panel per swept param, in the grid file's order
    ylabels = [ax.get_ylabel() for f in pages for ax in f.axes if ax.get_ylabel()]
    assert "loss_final" in ylabels or "err_final" in ylabels
    first = pages[0].axes[0]
    assert first.get_xscale() == "log"  # lr spans 900x: a log axis
    diverged = [ln for f in pages for ax in f.axes for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert diverged  # lr = 9 has no value to plot: marked on the top edge


def test_parallel_coordinates_for_three_swept_params(report: tuple[Path, list[Any]]) -> None:
    _, figures = report
    (fig,) = [f for f in figures if any("finished runs" in a.get_title() for a in f.axes)]
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["lr", "cond", "m", headline(labels[3:])]  # the swept params, then the metric
    assert labels[3] in ("loss_final", "err_final")
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 8  # the diverged runs (lr 9: 2 conds x 2 m x 2 seeds), grey and dashed, counted
    assert "diverged (8 runs)" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert not [f for f in figures if "mine (faulty)" in f.get_suptitle() and "finished runs" in f.get_suptitle()]


def test_declared_axes_and_derived_params() -> None:
    spec = {
        "blocks": [
            {"task": "a", "params": {"algo": "gd", "n": 3}, "product": {"lr": [1, 2]}, "zip": {"m": [1], "c": [2]}},
            {"task": "a", "params": {"algo": "sgd", "n": 3}},
            {"task": "b", "product": {"x": [1, 2]}},
        ]
    }
    assert declared_axes(spec, "a") == ["lr", "m", "c", "algo"]
    assert declared_axes({"task": "a", "space": {"lr": {}}}, "a") == ["lr"]
    # a resolved default that follows another param (a_var = 1/m) is no axis of its own
    frame = pd.DataFrame({"m": [40, 80, 40, 80], "a_var": [1 / 40, 1 / 80, 1 / 40, 1 / 80], "depth": [1, 1, 3, 3]})
    assert _derived(frame, ["a_var", "m", "depth"]) == {"a_var"}


def test_sweep_of_reads_params_from_params_json() -> None:
    runs = pd.DataFrame(
        {
            "run_id": list("abcd"),
            "status": ["ok", "ok", "ok", "failed"],
            "params_json": ['{"lr": 1, "seed": 0}', '{"lr": 2, "seed": 0}', '{"lr": 2, "seed": 1}', '{"lr": 3}'],
            "lr": [1, 2, 2, 3],
            "seed": [0, 0, 1, 0],
            "loss": [1.0, np.nan, 0.5, np.nan],
        }
    )
    sweep = sweep_of(runs)
    assert sweep.swept == ["lr"] and sweep.summary == ["loss"] and sweep.seeds == 2  # the failed run is no result
