"""analysis.load and analysis.curves asked for what the store does not have: a misspelt column, filter key,
grid or status is an error naming the valid ones (not a column of nulls or no rows), a filter of the wrong
type marks no file damaged, one name is not split into letters, and a missing root is not an empty store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pytest

import analysis
from analysis.aggregate import medians
from analysis.studies import trials_frame
from runner import run_grid
from runner.store import ResultStore
from runner.store.compact import compact
from runner.store.parts import QueryError
from tests.options import opts

GRID = {
    "name": "queries",
    "blocks": [
        {
            "task": "least_squares",
            "params": {"d_in": 6, "m": 20, "n_iters": 60},
            "product": {"lr": [0.05, 0.1]},
            "repeat": 2,
        },
        {"task": "least_squares", "params": {"d_in": 6, "m": 20, "n_iters": 60, "lr_rule": "optimal"}},
    ],
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("queries")
    run_grid(GRID, root, opts())
    return root


def test_a_filter_of_the_wrong_type_is_an_error_and_marks_no_part_damaged(root: Path) -> None:
    store = ResultStore(root)
    runs, curves = store.read_runs("least_squares").num_rows, store.read_curves("least_squares").num_rows
    assert runs == 5 and curves > 0
    with pytest.raises(QueryError, match="no kernel matching input types"):
        store.read_runs("least_squares", None, pc.field("n_iters") == "60")  # a string where the column is int64
    with pytest.raises(QueryError, match="No match for FieldRef"):
        store.read_runs("least_squares", None, pc.field("nosuch") == 1)
    # the same store object reads every run and curve afterwards, and a repair quarantines nothing
    assert store.reader.damaged == {}
    assert store.read_runs("least_squares").num_rows == runs
    assert store.read_curves("least_squares").num_rows == curves
    assert compact(store, repair=True).quarantined == []
    with pytest.raises(ValueError, match="no kernel matching"):
        analysis.load(root, "least_squares", filters={"n_iters": "60"})


def test_unknown_columns_and_filter_keys_name_the_closest_valid_ones(root: Path) -> None:
    with pytest.raises(ValueError, match=r"no 'lrr' \(closest: lr"):
        analysis.load(root, "least_squares", columns=["lrr"])
    with pytest.raises(ValueError, match=r"filters: .*no 'seeds' \(closest: seed"):
        analysis.load(root, "least_squares", filters={"seeds": 0})
    with pytest.raises(ValueError, match=r"curves.*no 'errr' \(closest: err"):
        analysis.curves(root, "least_squares", columns=["errr"])
    with pytest.raises(
        ValueError, match="not of its curves"
    ):  # a runs column asked of the curves: the store's own message
        analysis.curves(root, "least_squares", columns=["lr"])


def test_one_name_is_one_name_and_unknown_grids_or_statuses_are_errors(root: Path) -> None:
    assert "seed" in analysis.load(root, "least_squares", columns="seed").columns
    ok = analysis.load(root, "least_squares", statuses="ok")
    assert len(ok) == 5 and set(ok["status"]) == {"ok"}
    assert list(analysis.curves(root, "least_squares", columns="err").columns) == ["run_id", "step", "err"]
    with pytest.raises(ValueError, match=r"no 'divergd' \(closest: diverged\); valid: diverged, failed, ok"):
        analysis.load(root, "least_squares", statuses=["divergd"])
    with pytest.raises(ValueError, match=r"no 'querie' \(closest: queries\)"):
        analysis.load(root, "least_squares", grid="querie")
    with pytest.raises(ValueError, match="valid: queries"):
        analysis.members(root, "nope")


def test_a_none_filter_matches_the_runs_without_that_param(root: Path) -> None:
    optimal = analysis.load(root, "least_squares", filters={"lr": None})
    assert set(optimal["lr_rule"]) == {"optimal"} and len(optimal) == 1
    both = analysis.load(root, "least_squares", filters={"lr": [0.05, None]})
    assert sorted(both["lr"].fillna(-1)) == [-1, 0.05, 0.05]


def test_curves_of_a_trimmed_runs_frame_are_those_of_its_runs(root: Path) -> None:
    runs = analysis.load(root, "least_squares", filters={"lr": 0.1})
    full = analysis.curves(root, "least_squares", runs=runs, columns=["err"])
    trimmed = analysis.curves(root, "least_squares", runs=runs[["run_id", "lr"]], columns=["err"])
    pd.testing.assert_frame_equal(
        trimmed.sort_values(["run_id", "step"]).reset_index(drop=True),
        full.sort_values(["run_id", "step"]).reset_index(drop=True),
    )
    assert set(trimmed["run_id"]) == set(runs["run_id"]) and len(runs) == 2
    with pytest.raises(ValueError, match="run_id column"):
        analysis.curves(root, "least_squares", runs=runs[["lr"]])


def test_a_missing_root_is_not_an_empty_store(tmp_path: Path) -> None:
    missing = tmp_path / "typo"
    for read in (
        lambda: analysis.load(missing, "least_squares"),
        lambda: analysis.members(missing),
        lambda: analysis.task_names(missing),
        lambda: trials_frame(missing),
    ):
        with pytest.raises(FileNotFoundError, match="no results root at"):
            read()
    assert not missing.exists()


def test_over_seeds_counts_an_unreached_threshold_as_inf_when_asked() -> None:
    """Iterations to a tolerance: seed 0 of L=10 never got there (null). Skipped, the median is that of
    the one run that did; counted as +inf (as `medians` and the claims count it) it is worse, not better."""
    runs = pd.DataFrame({"L": [5, 5, 10, 10, 10], "iters_to_tol": pd.array([40, 44, pd.NA, 50, 70], dtype="Int64")})
    skipped = analysis.over_seeds(runs, ["L"], "iters_to_tol").set_index("L")
    counted = analysis.over_seeds(runs, ["L"], "iters_to_tol", unreached=True).set_index("L")
    assert skipped.loc[10, "n"] == 2 and skipped.loc[10, "median"] == 60.0
    assert counted.loc[10, "n"] == 3 and counted.loc[10, "median"] == 70.0 and counted.loc[10, "q75"] == np.inf
    assert counted["median"].tolist() == medians(runs, ["L"], "iters_to_tol").tolist()
    assert counted.loc[5].equals(skipped.loc[5])  # nothing unreached there: the same numbers


def test_finished_runs_of_a_source_not_in_the_store_are_no_rows(root: Path) -> None:
    """The claims ask for every grid a claim names; one that never ran gives no rows, not the error
    `load` gives a misspelt grid."""
    runs = analysis.finished_runs(root, "least_squares", ["absent", "queries"])
    assert len(runs) == 5 and set(runs["grid"]) == {"queries"}
    assert analysis.finished_runs(root, "least_squares", ["absent"]).empty
