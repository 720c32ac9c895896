"""docs/analysis.ipynb, the walkthrough that reads a store with plain pandas and matplotlib, runs from top
to bottom on two stores the test builds (a reduced demo grid; a user's own grid of least squares and
the external toy learner, with no demo grid and no paper's figure): every cell succeeds, its own check
that plain pandas and `analysis` give the same medians holds, and it draws its figures."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
import yaml
from nbclient import NotebookClient

from runner import run_grid
from tests.options import opts

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "analysis.ipynb"


def demo_store(root: Path) -> None:
    """grids/deep_linear/demo_depth.yaml at three depths and 60 iterations (the same grid name, so the
    notebook's figure is the demo's)."""
    grid = yaml.safe_load((ROOT / "grids" / "deep_linear" / "demo_depth.yaml").read_text())
    block = grid["blocks"][0]
    block["params"]["n_iters"] = 60
    block["product"]["L"] = [1, 2, 5]
    run_grid(grid, root, opts())


def own_store(root: Path) -> None:
    """A grid of one's own: least squares over step and conditioning (one step diverges), the toy learner."""
    grid = {
        "name": "mine",
        "blocks": [
            {
                "task": "least_squares",
                "params": {"d_in": 4, "d_out": 2, "n_iters": 300},
                "product": {"lr": [0.05, 9.0], "cond": [3.0, 30.0]},
                "repeat": 2,
            },
            {"task": "faulty", "product": {"x": [1.0, 2.0]}},
        ],
    }
    run_grid(grid, root, opts())


@pytest.mark.parametrize("store", [demo_store, own_store], ids=["demo", "own"])
def test_the_notebook_runs_on_any_store(
    store: Callable[[Path], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store(tmp_path / "store")
    monkeypatch.setenv("CONVGRID_RESULTS", str(tmp_path / "store"))  # the kernel inherits it
    monkeypatch.delenv("CONVGRID_GRID", raising=False)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "stored without outputs"
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) == 2  # the plain-pandas figure and the report's
    printed = "".join(out.get("text", "") for out in outputs if out.output_type == "stream")
    grid, task = ("demo_depth", "deep_linear") if store is demo_store else ("mine", "least_squares")
    assert f"drawing {grid!r}, task {task!r}" in printed  # the grid it picked, and its learner with most runs
    tables = "".join(out["data"].get("text/plain", "") for out in outputs if out.output_type == "execute_result")
    assert "status" in tables and ("L" in tables if store is demo_store else "cond" in tables)  # swept params


def test_the_readmes_plain_pandas_snippet_draws_one_curve_per_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's "Reading results" example, run as written (in a folder that holds results/demo)."""
    demo_store(tmp_path / "results" / "demo")
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Reading results", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "pd.read_parquet" in snippet and "convgrid" not in snippet and "analysis" not in snippet
    monkeypatch.chdir(tmp_path)
    import matplotlib

    matplotlib.use("Agg")
    scope: dict[str, Any] = {}
    exec(compile(snippet, "README.md", "exec"), scope)  # noqa: S102 - the README's own code
    data, ax = scope["data"], scope["ax"]
    assert list(data.columns) == ["run_id", "step", "err", "L", "seed", "status"]  # nothing suffixed
    assert len(ax.get_lines()) == data.groupby(["L", "seed"]).ngroups == 6  # 3 depths x 2 seeds
    assert (tmp_path / "curves.png").stat().st_size > 0
