"""Text a store or a file hands the terminal: control characters (NUL, ANSI escapes, CR/LF) in a stored
grid name are printed escaped, never raw; and `--only X --dry-run` says what `--only X` would run."""

from __future__ import annotations

import re
from pathlib import Path

from runner import run_grid
from runner.errors import printable
from runner.store import ResultStore
from tests.options import opts

GRID = {
    "name": "plain",
    "blocks": [
        {
            "task": "least_squares",
            "params": {"d_in": 4, "d_out": 2, "m": 12, "n_iters": 10},
            "product": {"seed": [0, 1]},
        }
    ],
}
HOSTILE = "evil\x1b[2J\x00\r\nname\u202e"
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\u202e]")  # what must never reach the terminal (tab and newline may)


def test_printable_escapes_controls_and_keeps_the_rest() -> None:
    assert printable("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
    assert printable(HOSTILE) == "evil\\x1b[2J\\x00\\r\\nname\\u202e"
    assert printable("a\tb\nc", keep="\t\n") == "a\tb\nc"


def test_status_prints_a_hostile_stored_grid_name_escaped(tmp_path: Path, cli) -> None:
    root = tmp_path / "results"
    run_grid(GRID, root, opts())
    # a store written by another tool, or by hand: the name never went through a grid file's checks
    row = {"grid": HOSTILE, "run_id": "0" * 64, "task": "least_squares", "kind": "grid", "source": HOSTILE, "block": 0}
    ResultStore(root).write_members([row])
    status = cli("status", str(root))
    assert status.returncode == 0, status.stderr
    assert "evil\\x1b[2J\\x00\\r\\nname\\u202e" in status.stdout  # one row: the newline shown, not obeyed
    assert not RAW.search(status.stdout), repr(status.stdout)
    report = cli("report", str(root), "--out", str(tmp_path / "report"))
    assert report.returncode == 0, report.stderr
    for page in ("report.md", "report.html"):
        text = (tmp_path / "report" / page).read_text()
        assert "evil" in text and "x1b" in text and not RAW.search(text.replace("\n", "")), page


def test_only_dry_run_counts_the_run_it_would_run_again(tmp_path: Path, cli) -> None:
    import yaml

    root = tmp_path / "results"
    grid = tmp_path / "plain.yaml"
    grid.write_text(yaml.safe_dump(GRID))
    assert cli("run", str(grid), "--results", str(root), "--executor", "local", "--no-progress").returncode == 0
    run_id = ResultStore(root).read_runs("least_squares", columns=["status"])["run_id"][0].as_py()
    dry = cli("run", str(grid), "--results", str(root), "--only", run_id[:10], "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "to run: 1" in dry.stdout and run_id[:12] in dry.stdout, dry.stdout
    real = cli("run", str(grid), "--results", str(root), "--only", run_id[:10], "--executor", "local", "--no-progress")
    assert real.returncode == 0 and "ran 1" in real.stdout, real.stdout
    missing = cli("run", str(grid), "--results", str(root), "--only", "ffffffffff", "--dry-run")
    assert missing.returncode == 2 and "--only" in missing.stderr
