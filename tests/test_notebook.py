"""docs/analysis.ipynb, the walkthrough that reads the demo store with plain pandas and matplotlib, runs
from top to bottom on a store the test builds (a reduced demo grid, in process): every cell succeeds,
its own check that plain pandas and `analysis` give the same medians holds, and it draws its figure."""

from __future__ import annotations

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
