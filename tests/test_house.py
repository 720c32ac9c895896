"""The house rules that once had bugs: every option reaches the executor of a swept study, the
package facade exports what it names, and a malformed knob is one clear error."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

import runner
from runner.errors import ConfigError
from runner.settings import settings
from runner.store import ResultStore
from tests.conftest import CliResult

# One study per step-size range (`sweep`), each handing its trials over 4 at a time: least squares
# batches them (tasks.base.BatchableTask), and a batch's members share its clock: each stored run's
# wall_s is the batch's seconds over its members, equal within a batch.
SWEPT = {
    "name": "swept",
    "task": "least_squares",
    "params": {"d_in": 40, "d_out": 2, "m": 80, "n_iters": 400, "tol": 1.0e-300},
    "space": {"lr": {"type": "float", "low": 0.01, "high": 0.05}},
    "objective": {"metric": "err_final"},
    "sampler": {"name": "random", "seed": 0},
    "n_trials": 8,
    "parallel": 4,
    "batch": 4,
    "sweep": {"seed": [0, 1]},
}


def _shared_wall_s(root: Path) -> int:
    """How many stored runs share their wall_s with another run (batch members do, lone runs do not)."""
    times = Counter(ResultStore(root).read_runs("least_squares", ["wall_s"])["wall_s"].to_pylist())
    return sum(n for n in times.values() if n > 1)


def test_a_swept_study_passes_every_option_to_its_executor(tmp_path: Path, cli: Callable[..., CliResult]) -> None:
    """`--no-batch` on a swept study: each trial runs alone. (The shared executor of a swept study was
    built from five of the options: --no-batch and --gpus-per-worker were dropped, and the trials of a
    batch ran as one.)"""
    study = tmp_path / "swept.yaml"
    study.write_text(yaml.safe_dump(SWEPT))
    batched = cli("tune", str(study), "--results", str(tmp_path / "batched"), "--no-progress")
    alone = cli("tune", str(study), "--results", str(tmp_path / "alone"), "--no-progress", "--no-batch")
    assert batched.returncode == alone.returncode == 0, batched.stderr + alone.stderr
    assert _shared_wall_s(tmp_path / "batched") >= 8  # the reference: batching is visible in the rows
    assert _shared_wall_s(tmp_path / "alone") == 0


def test_a_swept_study_asked_for_gpus_goes_to_ray(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """auto with --gpus-per-worker is Ray (GPU actors), never the in-process warm start."""
    from runner.execute import auto
    from runner.execute.options import ExecutionOptions
    from runner.tune import driver

    chosen: list[str] = []
    real = auto.AutoPolicy.choose

    def spy(self: auto.AutoPolicy, options: ExecutionOptions, estimate: object = None) -> auto.Choice:
        chosen.append(real(self, options, estimate))
        raise RuntimeError("stop before any executor starts")

    monkeypatch.setattr(auto.AutoPolicy, "choose", spy)
    with pytest.raises(RuntimeError, match="stop before"):
        driver.tune(SWEPT, tmp_path, ExecutionOptions(gpus_per_worker=0.5, batch=False))
    assert chosen == ["ray"]


def test_the_package_exports_what_it_names() -> None:
    for name in runner.__all__:
        assert getattr(runner, name) is not None, name
    assert runner.Grid.__module__ == "runner.grid.cells"


def test_a_malformed_knob_is_one_error_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONVGRID_LEASE_S", "soon")
    with pytest.raises(ConfigError) as err:
        settings()
    assert err.value.key == "CONVGRID_LEASE_S" and "'soon'" in str(err.value)
    monkeypatch.setenv("CONVGRID_LEASE_S", "12.5")
    assert settings().lease_s == 12.5
    monkeypatch.setenv("CONVGRID_LEARNERS", "faulty=tests.toy_learner,broken")
    with pytest.raises(ConfigError, match="name=package"):
        settings()


def test_the_command_line_reports_a_malformed_knob_with_exit_2(
    tmp_path: Path, cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONVGRID_MAX_CELLS", "-3")
    result = cli("run", "grids/least_squares/step_sweep.yaml", "--dry-run", "--results", str(tmp_path))
    assert result.returncode == 2 and "CONVGRID_MAX_CELLS" in result.stderr


def test_the_settings_table_in_the_docs_is_the_settings_model() -> None:
    from runner.settings import describe

    text = (Path(__file__).resolve().parent.parent / "docs" / "architecture.md").read_text()
    for name, default, what in describe():
        assert f"| `{name}` | `{default!r}` | {what} |" in text, name
