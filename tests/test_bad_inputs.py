"""Bad input, as users type it: one message naming the file, block and key (or the option and its
valid range), exit code 2, and the results root exactly as it was before."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.cli import main
from tests.conftest import files_under

GRID_OK = "blocks:\n  - task: least_squares\n    params: {n_iters: 20}\n"
STUDY_OK = (
    "task: least_squares\nparams: {n_iters: 20}\nobjective: {metric: err_final}\nn_trials: 2\n"
    "space:\n  lr: {type: float, low: 0.01, high: 0.5}\n"
)


def bomb(depth: int) -> str:
    """A flow list of 9**depth ones in a few hundred bytes: each level is nine aliases of the one below."""
    text = "&l0 [1,1,1,1,1,1,1,1,1]"
    for i in range(1, depth):
        text = f"&l{i} [{text}, {', '.join([f'*l{i - 1}'] * 8)}]"
    return text


BOMB_SAYS = ["key 'blocks.0.params.seed'", "aliases"]

# name -> (file kind, file text or bytes, extra CLI args, texts the message must contain)
CASES: dict[str, tuple[str, str | bytes, list[str], list[str]]] = {
    "non_utf8": (
        "grid",
        b"blocks:\n  - task: least_squares\n    params: {n_iters: \xff}\n",
        [],
        ["not UTF-8", "line 3"],
    ),
    "inf_float": ("grid", GRID_OK.replace("n_iters: 20", "lr: .inf"), [], ["key 'lr'", "not a finite number"]),
    "beyond_int64": (
        "grid",
        GRID_OK.replace("n_iters: 20", "seed: 9223372036854775808"),
        [],
        ["key 'seed'", "64-bit integer range"],
    ),
    "deep_nesting": ("grid", "blocks: " + "[" * 20000 + "]" * 20000 + "\n", [], ["nested too deeply"]),
    "duplicate_key": ("grid", GRID_OK.replace("n_iters: 20", "lr: 0.1, lr: 0.2"), [], ["duplicate key 'lr'"]),
    "bool_for_int": ("grid", GRID_OK.replace("n_iters: 20", "n_iters: true"), [], ["key 'n_iters'", "bool"]),
    "misspelt_top_key": ("grid", GRID_OK.replace("blocks:", "blokcs:"), [], ["key 'blokcs'", "did you mean 'blocks'"]),
    "misspelt_param": ("grid", GRID_OK.replace("n_iters", "n_itres"), [], ["key 'n_itres'", "did you mean 'n_iters'"]),
    "too_many_cells": (
        "grid",
        "blocks:\n  - task: least_squares\n    product: {lr: ["
        + ", ".join(f"0.{i + 1:04d}" for i in range(1000))
        + "]}\n    repeat: 100000\n",
        [],
        ["100,000,000 cells", "--max-cells"],
    ),
    "negative_threads": ("grid", GRID_OK, ["--threads", "-2"], ["--threads", ">= 1"]),
    "zero_flush_every": ("grid", GRID_OK, ["--flush-every", "0"], ["--flush-every", ">= 1"]),
    "negative_timeout": ("grid", GRID_OK, ["--timeout", "-1"], ["--timeout", "> 0"]),
    "study_inf_bound": ("study", STUDY_OK.replace("high: 0.5", "high: .inf"), [], ["space.lr.high", "finite"]),
    "study_huge_grid": (
        "study",
        STUDY_OK.replace("high: 0.5}", "high: 0.5, step: 1.0e-12}") + "sampler: grid\n",
        [],
        ["points", "coarser step"],
    ),
    "quoted_int": ("grid", GRID_OK.replace("n_iters: 20", 'n_iters: "20"'), [], ["key 'n_iters'", "expected int"]),
    "quoted_float_in_axis": (
        "grid",
        GRID_OK + "    product: {lr: [0.1, '0.2']}\n",
        [],
        ["key 'lr'", "expected float", "'0.2'"],
    ),
    "quoted_in_list": (
        "grid",
        GRID_OK.replace("blocks:\n  - task: least_squares", "blocks:\n  - task: hierarchical").replace(
            "n_iters: 20", "d: 8, k: [4, '3']"
        ),
        [],
        ["key 'k'", "expected int", "'3'"],
    ),
    "study_misspelt_metric": (
        "study",
        STUDY_OK.replace("metric: err_final", "metric: err_finl"),
        [],
        ["key 'objective.metric'", "did you mean 'err_final'"],
    ),
    "study_quoted_number": ("study", STUDY_OK.replace("n_iters: 20", "n_iters: '20'"), [], ["n_iters", "expected int"]),
    "study_reference_not_searched": (
        "study",
        STUDY_OK + "reference: [{label: theory, param: lrr, value: 0.4}]\n",
        [],
        ["key 'reference.0.param'", "did you mean 'lr'"],
    ),
    "study_reference_both_axes": (
        "study",
        STUDY_OK + "reference: [{label: theory, param: lr, metric: err_final, value: 0.4}]\n",
        [],
        ["reference", "exactly one of metric"],
    ),
    "study_reference_log_nonpositive": (
        "study",
        STUDY_OK.replace("metric: err_final}", "metric: err_final, log: true}")
        + "reference: [{label: floor, metric: err_final, value: 0}]\n",
        [],
        ["key 'reference.0.value'", "> 0"],
    ),
    "study_misspelt_key": ("study", STUDY_OK.replace("n_trials", "n_trails"), [], ["did you mean 'n_trials'"]),
    "study_bool_n_trials": ("study", STUDY_OK.replace("n_trials: 2", "n_trials: true"), [], ["n_trials", "bool"]),
    # a billion laughs under a param: 364 bytes that expand to 9**8 = 43 million seeds (the issue's, which
    # ran a dry-run past 160 s and 7.8 GB), and one of 9**6 (within the bound) whose message printed all of it
    "alias_bomb": ("grid", GRID_OK.replace("{n_iters: 20}", "{n_iters: 20, seed: " + bomb(8) + "}"), [], BOMB_SAYS),
    "alias_nested_value": (
        "grid",
        GRID_OK.replace("{n_iters: 20}", "{n_iters: 20, seed: " + bomb(6) + "}"),
        [],
        ["key 'seed'", "valid integer", "..."],
    ),
    "long_value": ("grid", GRID_OK.replace("n_iters: 20", "seed: [" + "12345, " * 20_000 + "1]"), [], ["seed", "..."]),
    "grid_name_escape": ("grid", 'name: "red\\e[31mgrid"\n' + GRID_OK, [], ["key 'name'", "control character"]),
    "grid_name_newline": ("grid", 'name: "two\\nlines"\n' + GRID_OK, [], ["key 'name'", "control character"]),
    "study_name_nul": ("study", 'name: "nul\\0"\n' + STUDY_OK, [], ["key 'name'", "control character"]),
    "threads_beyond_cpus": ("grid", GRID_OK, ["--threads", "100000"], ["--threads", "100000", "valid: 1 to"]),
    "workers_beyond_cpus": (
        "grid",
        GRID_OK,
        ["--executor", "ray", "--workers", "100000"],
        ["--workers", "100000", "valid: 1 to"],
    ),
    "study_threads_beyond_cpus": ("study", STUDY_OK, ["--threads", "100000"], ["--threads", "valid: 1 to"]),
}


def _call(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_one_message_exit_2_and_nothing_written(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kind, text, extra, expected = CASES[name]
    source = tmp_path / f"bad.{kind}.yaml"
    if isinstance(text, bytes):
        source.write_bytes(text)
    else:
        source.write_text(text)
    results = tmp_path / "results"
    results.mkdir()
    (results / "keep.txt").write_text("a file that was there before")
    before = files_under(results)
    command = "run" if kind == "grid" else "tune"
    code, err = _call([command, str(source), "--results", str(results), "--executor", "local", *extra], capsys)
    assert code == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()[-1]) < 1_000, err[:2_000]  # one bounded message, whatever the input
    assert err.startswith("usage:") or err.count("\n") == 1, err  # argparse's come after its usage lines
    for piece in expected:
        assert piece in err, (piece, err)
    if kind == "grid" and not extra:
        assert str(source) in err  # the message names the file
    assert files_under(results) == before


def test_results_root_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID_OK)
    root = tmp_path / "results"
    root.write_text("not a folder")
    code, err = _call(["run", str(grid), "--results", str(root), "--executor", "local"], capsys)
    assert code == 2 and "key '--results'" in err and "a file, not a folder" in err
    assert root.read_text() == "not a folder"


def test_results_root_that_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID_OK)
    # /sys refuses new folders even to root, where permission bits would not stop anything.
    code, err = _call(["run", str(grid), "--results", "/sys/convgrid-results", "--executor", "local"], capsys)
    assert code == 2 and "key '--results'" in err and "cannot write the results root" in err
    assert "<spec>" not in err and "error: key '--results': cannot write" in err  # no file to name: the option does
    assert not Path("/sys/convgrid-results").exists()


def test_a_report_folder_that_is_a_file_or_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`report --out` at a file, or where nothing may be written: exit 2 naming --out (a traceback from
    the figures' mkdir before), and the file is untouched."""
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID_OK)
    root = tmp_path / "results"
    assert _call(["run", str(grid), "--results", str(root), "--executor", "local", "--no-progress"], capsys)[0] == 0
    afile = tmp_path / "afile"
    afile.write_text("mine")
    code, err = _call(["report", str(root), "--out", str(afile)], capsys)
    assert code == 2 and "key '--out'" in err and "the report folder is a file, not a folder" in err, err
    assert afile.read_text() == "mine"
    code, err = _call(["report", str(root), "--out", "/sys/convgrid-report"], capsys)
    assert code == 2 and "cannot write the report folder" in err and "Traceback" not in err, err
    code, err = _call(["report", "s3://bucket/prefix"], capsys)
    assert code == 2 and "needs --out" in err, err


def test_a_grid_file_beyond_the_size_bound_is_refused_unread(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.grid.yaml_source import MAX_FILE_BYTES

    grid = tmp_path / "huge.yaml"
    with grid.open("w") as out:  # a valid grid padded with a comment: only its size is wrong
        out.write(GRID_OK)
        out.write("#" + "x" * (MAX_FILE_BYTES - len(GRID_OK)) + "\n")
    root = tmp_path / "results"
    code, err = _call(["run", str(grid), "--results", str(root), "--executor", "local"], capsys)
    assert code == 2 and str(grid) in err and "larger than" in err and "MiB" in err, err
    assert files_under(root) == []


def test_a_results_root_that_is_a_dangling_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "g.yaml"
    grid.write_text(GRID_OK)
    root = tmp_path / "results"
    root.symlink_to(tmp_path / "gone" / "results")
    code, err = _call(["run", str(grid), "--results", str(root), "--executor", "local"], capsys)
    assert code == 2 and "key '--results'" in err and "symbolic link" in err and "gone/results" in err, err
    assert "File exists" not in err
    assert root.is_symlink() and not (tmp_path / "gone").exists()


def test_a_grid_file_whose_name_has_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "red\x1b[31mgrid.yaml"  # no name in the file: the grid is named after it
    grid.write_text(GRID_OK)
    root = tmp_path / "results"
    code, err = _call(["run", str(grid), "--results", str(root), "--executor", "local"], capsys)
    assert code == 2 and "control character" in err and "\x1b" not in err and "\\x1b" in err, err
    assert files_under(root) == []
