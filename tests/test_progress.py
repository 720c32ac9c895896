"""Progress output: plain periodic lines when not a terminal, and a final summary line from the CLI."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from runner.cli import main
from runner.execute.progress import Progress


def test_plain_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    bar = Progress(total=10, label="grid", stream=stream, every_s=0.0)
    bar.update(["ok"] * 3)
    bar.update(["diverged", "failed"])
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in stream.getvalue()
    assert lines[-1].startswith("grid: 5/10 ok=3 diverged=1 failed=1 |")
    assert "run/s" in lines[-1] and "eta" in lines[-1]


def test_cli_prints_a_summary_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text("blocks:\n  - task: least_squares\n    params: {n_iters: 300}\n    product: {lr: [0.01, 9.0]}\n")
    assert main(["run", str(grid), "--results", str(tmp_path / "r"), "--executor", "local"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("g: ran 2 of 2 cells") and "diverged 1" in out[-1] and "ok 1" in out[-1]
