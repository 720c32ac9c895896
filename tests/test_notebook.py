"""docs/analysis.ipynb, the walkthrough that reads the demo store with plain pandas and matplotlib, runs
from top to bottom on a store the test builds (a reduced demo grid, in process): every cell succeeds,
its own check that plain pandas and `analysis` give the same medians holds, and it draws its figure."""

from __future__ import annotations

from pathlib import Path

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


def test_the_notebook_runs_on_the_demo_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    demo_store(tmp_path / "demo")
    monkeypatch.setenv("CONVGRID_RESULTS", str(tmp_path / "demo"))  # the kernel inherits it
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not cell.get("outputs") for cell in nb.cells if cell.cell_type == "code"), "stored without outputs"
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) == 2  # the plain-pandas figure and the report's
    tables = "".join(out["data"].get("text/plain", "") for out in outputs if out.output_type == "execute_result")
    assert "sweeps_to_tol" in tables  # the runs table, read with pandas
