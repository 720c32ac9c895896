"""`convgrid tasks [NAME]`: every registered task, and one task's params per variant."""

from __future__ import annotations

import pytest

from runner.cli import main
from tasks.registry import builtin_task_names


def test_lists_every_task_with_its_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    for name in builtin_task_names():
        assert name in out
    assert "unavailable" not in out


def test_one_task_shows_variants_types_defaults_bounds_and_docs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "deep_linear"]) == 0
    out = capsys.readouterr().out
    assert "[algo=bcgd]" in out and "[algo=gd]" in out and "[algo=bcsgd]" in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("tol "))
    assert "float" in line and "1e-10" in line and ">0.0" in line and "threshold" in line
    assert "summary:" in out and "sweeps_to_tol (float)" in out and "curve:   step (int)" in out
    curve = next(ln for ln in out.splitlines() if ln.startswith("curve:"))
    assert "lr_t (float)" in curve and "err (float)" in curve and " lr " not in curve  # the store's names


def test_unknown_task_is_exit_2_with_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "deep_linaer"]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'deep_linaer'" in err and "deep_linear" in err
