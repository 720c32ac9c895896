"""Grid files: validation errors (exit 2, a message naming file/block/key/choices, nothing written),
YAML scalars, identity of cells written two ways, expansion of product/zip/repeat."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner import load_grid
from runner.cli import main
from runner.errors import ConfigError
from tests.conftest import files_under

GOOD = """
name: g
blocks:
  - task: least_squares
    params: {d_in: 6, d_out: 2, m: 20, n_iters: 30}
    product: {lr: [1e-2, 0.05]}
"""

BAD_CASES = {
    "unknown_task": (
        "blocks:\n  - task: least_sqares\n",
        ["block 0", "key 'task'", "unknown task 'least_sqares'", "valid choices:", "least_squares"],
    ),
    "unknown_block_key": (
        "blocks:\n  - task: least_squares\n    prodct: {lr: [0.1]}\n",
        ["block 0", "key 'prodct'", "valid choices: task, params, product, zip, repeat"],
    ),
    "unknown_param": (
        "blocks:\n  - task: least_squares\n    params: {learning_rate: 0.1}\n",
        ["block 0", "key 'learning_rate'", "does not take this param", "n_iters"],
    ),
    "param_of_other_algorithm": (
        "blocks:\n  - task: least_squares\n    params: {lr_rule: optimal, lr: 0.1}\n",
        ["key 'lr'", "when lr_rule is 'optimal'", "valid choices:"],
    ),
    "unknown_variant": (
        "blocks:\n  - task: least_squares\n    params: {lr_rule: best}\n",
        ["key 'lr_rule'", "unknown variant 'best'", "valid choices: const, optimal"],
    ),
    "wrong_type": (
        "blocks:\n  - task: least_squares\n    params: {n_iters: many}\n",
        ["key 'n_iters'", "valid integer", "'many'"],
    ),
    "out_of_range_in_axis": (
        "blocks:\n  - task: least_squares\n  - task: least_squares\n    product: {lr: [0.1, -1]}\n",
        ["block 1", "key 'lr'", "greater than 0", "-1"],
    ),
    "bad_literal": (
        "blocks:\n  - task: least_squares\n    params: {dtype: float16}\n",
        ["key 'dtype'", "valid choices: float64, float32"],
    ),
    "malformed_yaml": ("blocks:\n  - task: [least_squares\n", ["malformed YAML", "line"]),
    "not_a_mapping": ("- 1\n- 2\n", ["must be a mapping"]),
    "zip_unequal": (
        "blocks:\n  - task: least_squares\n    zip: {lr: [0.1, 0.2], m: [10]}\n",
        ["block 0", "key 'zip'", "equal lengths"],
    ),
    "axis_twice": (
        "blocks:\n  - task: least_squares\n    params: {lr: 0.1}\n    product: {lr: [0.2]}\n",
        ["key 'lr'", "more than once"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_grid_exits_2_names_the_problem_and_writes_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, expected = BAD_CASES[case]
    grid = tmp_path / f"{case}.yaml"
    grid.write_text(text)
    results = tmp_path / "results"
    code = main(["run", str(grid), "--results", str(results), "--executor", "local", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert str(grid) in err
    for fragment in expected:
        assert fragment in err, (fragment, err)
    assert files_under(results) == []


def test_console_script_exit_code_is_2(tmp_path: Path) -> None:
    grid = tmp_path / "bad.yaml"
    grid.write_text("blocks:\n  - task: nope\n")
    proc = subprocess.run(
        [sys.executable, "-m", "runner.cli", "run", str(grid), "--results", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "unknown task 'nope'" in proc.stderr and "valid choices" in proc.stderr
    assert not (tmp_path / "r").exists()


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read file"):
        load_grid(tmp_path / "absent.yaml")


def test_yaml_exponent_scalars_become_floats_and_one_cell_has_one_id(tmp_path: Path) -> None:
    a = tmp_path / "a.yaml"
    a.write_text("blocks:\n  - task: least_squares\n    params: {lr: 1e-5, tol: 1e-8}\n")
    b = tmp_path / "b.yaml"
    b.write_text("blocks:\n  - task: least_squares\n    params: {tol: 0.00000001, lr: 1.0e-5, d_in: 20}\n")
    ga, gb = load_grid(a), load_grid(b)
    assert isinstance(ga.cells[0].params.lr, float) and ga.cells[0].params.lr == 1e-5
    # d_in: 20 is the default, spelt out in b: still the same cell.
    assert ga.cells[0].run_id == gb.cells[0].run_id


def test_product_zip_repeat_expand_as_documented() -> None:
    grid = load_grid(
        {
            "blocks": [
                {
                    "task": "least_squares",
                    "params": {"seed": 10},
                    "product": {"lr": [0.01, 0.02]},
                    "zip": [{"d_in": [4, 8], "m": [10, 20]}],
                    "repeat": 3,
                },
                {"task": "least_squares", "params": {"lr": 0.01, "d_in": 4, "m": 10, "seed": 10}},  # already in block 0
            ]
        }
    )
    assert len(grid.cells) == 2 * 2 * 3
    combos = {(c.params.lr, c.params.d_in, c.params.m, c.params.seed) for c in grid.cells}
    assert (0.02, 8, 20, 12) in combos and (0.01, 4, 10, 10) in combos
    assert not any(d == 4 and m == 20 for _, d, m, _ in combos)  # zipped, not crossed
    assert len({c.run_id for c in grid.cells}) == len(grid.cells)


def test_dry_run_prints_cells_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text(GOOD)
    results = tmp_path / "results"
    assert main(["run", str(grid), "--results", str(results), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 cells" in out and "to run: 2" in out and '"lr": 0.01' in out
    assert files_under(results) == []
