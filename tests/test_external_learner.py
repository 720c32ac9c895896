"""A learner defined outside convgrid, in a temporary folder, through the one documented mechanism
(CONVGRID_LEARNERS=name=package): run, tune, check and report, on a two-node Ray cluster whose
workers can only import the learner because the driver ships it (runtime_env py_modules + env_vars).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.ray

TASK = '''
from typing import Any, ClassVar

from pydantic import Field

from tasks.base import FieldType, Result, RunContext, TaskParams, is_diverged


class QuadParams(TaskParams):
    a: float = Field(2.0, gt=0, description="curvature of f(x) = a x^2 / 2")
    lr: float = Field(0.1, gt=0, description="constant step")
    n_iters: int = Field(20, ge=1, le=10_000, description="iterations")


class QuadTask:
    """GD on a one-dimensional quadratic: x_{t+1} = (1 - lr a) x_t, x_0 = 1."""

    name: ClassVar[str] = "quad"
    version: ClassVar[str] = "1"
    Params: ClassVar[Any] = QuadParams
    summary_fields: ClassVar[dict[str, FieldType]] = {"loss_final": "float", "rate_theory": "float"}
    curve_fields: ClassVar[dict[str, FieldType]] = {"loss": "float"}
    examples: ClassVar[list[dict[str, Any]]] = [{"lr": 0.1}]
    diverging_example: ClassVar[dict[str, Any] | None] = {"lr": 5.0, "n_iters": 2000}

    def run(self, p: QuadParams, ctx: RunContext) -> Result:
        x, steps, losses = 1.0, [], []
        for t in range(p.n_iters + 1):
            loss = p.a * x * x / 2
            steps.append(t)
            losses.append(loss)
            if is_diverged(loss):
                return Result("diverged", curve={"step": steps, "loss": losses}, n_steps=t, diverged_step=t)
            if not ctx.report(t, loss=loss):
                return Result(ctx.stop_status(), n_steps=t)
            x = (1 - p.lr * p.a) * x
        summary = {"loss_final": losses[-1], "rate_theory": (1 - p.lr * p.a) ** 2}
        curve = {"step": steps, "loss": losses}
        return Result("ok", summary=summary, curve=curve, n_steps=p.n_iters, flops=3.0 * p.n_iters)


TASK = QuadTask
'''

FIGURES = """
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd


def loss_by_lr(runs: pd.DataFrame, curves: pd.DataFrame, out: Path) -> list[Path]:
    fig, ax = plt.subplots()
    for run_id, curve in curves.groupby("run_id"):
        lr = runs.set_index("run_id").loc[run_id, "lr"]
        ax.semilogy(curve["step"], curve["loss"], label=f"lr {lr:g}")
    ax.legend()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "loss_by_lr.png"
    fig.savefig(path)
    plt.close(fig)
    return [path]


FIGURES = {"quad_sweep": loss_by_lr}
"""

CLAIMS = """
from analysis.claims import FAILS, HOLDS, Claim, Verdict


def _best_step(runs, curves):
    best = runs.loc[runs["loss_final"].idxmin(), "lr"]
    theory = 1 / runs["a"].iloc[0]
    return Verdict(HOLDS if abs(best - theory) < 1e-12 else FAILS, f"best lr {best:g}", theory=f"1/a = {theory:g}")


CLAIMS = [Claim("quad.best_step", "-", "quad", ("quad_sweep",), "the step 1/a is best", _best_step)]
"""


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def _learner_package(root: Path) -> Path:
    pkgs = root / "pkgs"
    package = pkgs / "quad_learner"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""A learner that convgrid does not ship."""\n')
    (package / "task.py").write_text(textwrap.dedent(TASK))
    (package / "figures.py").write_text(textwrap.dedent(FIGURES))
    (package / "claims.py").write_text(textwrap.dedent(CLAIMS))
    return pkgs


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_an_external_learner_runs_tunes_checks_and_reports_on_two_nodes(tmp_path: Path, two_nodes) -> None:
    pkgs = _learner_package(tmp_path)
    grid = tmp_path / "quad_sweep.yaml"
    grid.write_text(
        yaml.safe_dump({"name": "quad_sweep", "blocks": [{"task": "quad", "product": {"lr": [0.1, 0.25, 0.5, 0.75]}}]})
    )
    study = tmp_path / "quad_lr.yaml"
    study.write_text(
        yaml.safe_dump(
            {
                "name": "quad_lr",
                "task": "quad",
                "space": {"lr": {"type": "float", "low": 0.05, "high": 0.9}},
                "objective": {"metric": "loss_final", "direction": "minimize", "log": True},
                "sampler": {"name": "tpe", "seed": 0},
                "n_trials": 6,
                "parallel": 2,
            }
        )
    )
    # Only the driver has the learner on its path; the nodes' workers were started without it.
    env = {
        **os.environ,
        "CONVGRID_LEARNERS": "quad=quad_learner",
        "PYTHONPATH": os.pathsep.join([str(pkgs), str(REPO)]),
    }
    results, address = tmp_path / "results", two_nodes.address

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "runner.cli", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=240
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc

    assert (
        "ran 4 of 4 cells"
        in cli("run", str(grid), "--results", str(results), "--address", address, "--no-progress").stdout
    )
    cli("tune", str(study), "--results", str(results), "--address", address, "--no-progress")
    checked = cli("check", str(results)).stdout
    assert "quad.best_step: holds" in checked
    out = tmp_path / "report"
    cli("report", str(results), "--out", str(out))
    assert (out / "figures" / "quad_sweep" / "loss_by_lr.png").is_file()
    page = _Tags()
    page.feed((out / "report.html").read_text())
    assert "img" in page.tags

    from runner.store import ResultStore

    runs = ResultStore(results).read_runs("quad").to_pandas()
    assert len(runs) >= 4 + 1 and set(runs["status"]) == {"ok"}  # the grid's 4 and the study's distinct trials
    assert ResultStore(results).read_runs("quad", columns=["loss_final"])["loss_final"].null_count == 0
