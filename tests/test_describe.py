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


@pytest.mark.parametrize("width", [60, 100])
def test_task_descriptions_wrap_whole_and_are_never_cut_mid_phrase(width: int) -> None:
    """Each task's description is its docstring's whole first paragraph, wrapped at words to the width
    (issue 45: the list showed the paragraph's first source line, stopping mid-phrase)."""
    from runner.cli.describe import _doc, list_tasks
    from tasks import get_task

    out = list_tasks(width)
    assert all(len(line) <= width for line in out.splitlines()), out
    entries = " ".join(out.split())  # the wrapped text, rejoined
    for name in builtin_task_names():
        paragraph = _doc(type(get_task(name)))  # the class's docstring, or its module's
        assert paragraph.endswith((".", ")")), paragraph  # a whole sentence, the thing shown
        assert paragraph in entries, name


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
