"""analysis: loading typed frames from a real store, seed aggregation against numpy, reports with
figures, and the claims table with its strict mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import analysis
from analysis.claims import FAILS, HOLDS, Claim, Verdict, evaluate
from analysis.report import build_report
from runner import run_grid
from runner.cli import main
from runner.grid.spec import load_grid
from runner.run.members import member_row
from runner.store import ResultStore
from tests.options import opts

LSQ = {
    "name": "lsq_full",
    "blocks": [
        {
            "task": "least_squares",
            "params": {"d_in": 8, "m": 30, "n_iters": 400, "cond": 5.0},
            "product": {"lr": [0.02, 0.05, 5.0]},
            "repeat": 3,
        },
        {
            "task": "least_squares",
            "params": {"d_in": 8, "m": 30, "n_iters": 400, "cond": 5.0, "lr_rule": "optimal"},
            "repeat": 3,
        },
    ],
}
RESNET_SMALL = Path(__file__).resolve().parent.parent / "grids" / "linear_resnet" / "small" / "fig1d_depth_m200.yaml"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store")
    run_grid(LSQ, root, opts())
    run_grid(RESNET_SMALL, root, opts())
    run_grid({"name": "other", "blocks": [{"task": "least_squares", "params": {"lr": 0.01}}]}, root, opts())
    return root


def test_load_is_typed_filtered_and_grid_scoped(store: Path) -> None:
    runs = analysis.load(store, "least_squares", grid="lsq_full")
    assert len(runs) == 12 and set(runs["status"]) == {"ok", "diverged"}
    assert runs["lr"].dtype == np.float64 and runs["n_iters"].dtype == np.int64
    assert runs["started"].dt.tz is not None
    assert len(analysis.load(store, "least_squares")) == 13  # the other grid's run too
    few = analysis.load(store, "least_squares", filters={"lr": [0.02, 0.05]}, columns=["lr", "err_final"])
    assert len(few) == 6 and set(few.columns) == {"run_id", "finished", "status", "batch_id", "lr", "err_final"}
    with pytest.raises(FileNotFoundError, match="tasks there"):
        analysis.load(store, "deep_linear")


def test_curves_follow_runs(store: Path) -> None:
    runs = analysis.load(store, "least_squares", grid="lsq_full", filters={"lr": 0.05})
    cur = analysis.curves(store, "least_squares", runs=runs, columns=["err"])
    assert set(cur["run_id"]) == set(runs["run_id"]) and list(cur.columns) == ["run_id", "step", "err"]
    n_steps = runs.set_index("run_id")["n_steps"]
    assert (cur.groupby("run_id")["step"].max() == n_steps.loc[cur["run_id"].unique()]).all()


def test_over_seeds_matches_numpy(store: Path) -> None:
    runs = analysis.load(store, "least_squares", grid="lsq_full", statuses=["ok"])
    agg = analysis.over_seeds(runs, ["lr"], "err_final")
    for _, row in agg.dropna(subset=["lr"]).iterrows():
        values = runs.loc[runs["lr"] == row["lr"], "err_final"].to_numpy()
        assert row["n"] == 3
        assert row["median"] == pytest.approx(np.median(values))
        assert row["q25"] == pytest.approx(np.quantile(values, 0.25))
        half = 4.302652729911275 * values.std(ddof=1) / np.sqrt(3)  # t_{0.975, 2}
        assert row["ci_high"] - row["mean"] == pytest.approx(half)
    band = analysis.curve_band(analysis.curves(store, "least_squares", runs=runs), runs, ["lr"], "step", "err")
    assert {"median", "q25", "q75", "n"} <= set(band.columns)


def test_report_has_figures_grids_and_provenance(store: Path, tmp_path: Path) -> None:
    report = build_report(str(store), tmp_path)
    grids = {s.grid: s for s in report.sections}
    assert set(grids) == {"lsq_full", "other", "small_fig1d_depth_m200"}
    resnet = grids["small_fig1d_depth_m200"]
    assert resnet.reduced and resnet.figure in {"fig1d_depth_m200", "small_fig1d_depth_m200"} and resnet.images
    assert all(p.exists() and p.stat().st_size > 10_000 for p in resnet.images)
    md = (tmp_path / "report.md").read_text()
    assert "reduced (CI/demo size, not a reproduction)" in md and "code_version" in md
    assert "## Claims" in md and "003.fig1d.depth" in md and "| reduced | holds |" in md
    html = (tmp_path / "report.html").read_text()
    assert grids["lsq_full"].images, "a grid no figure module draws gets the default figures (issue 45)"
    assert html.count("data:image/png;base64,") == sum(len(s.images) for s in report.sections)
    assert html.count("<table") == 2 and html.count("<table") == html.count("</table>")


def _best_step_claim(expected: str) -> Claim:
    def check(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
        ok = runs[runs["status"] == "ok"]
        best = ok.groupby(ok["lr_rule"])["err_final"].median()
        holds = best["optimal"] <= best.min()
        return Verdict(HOLDS if holds else FAILS, f"median final error by rule: {best.to_dict()}")

    return Claim(
        "lsq.optimal_step_best",
        "-",
        "least_squares",
        ("lsq_full",),
        "the optimal constant step beats the others",
        check,
        expected=expected,
    )


def test_claims_decide_and_strict_flags_surprises(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    table = evaluate(str(store), [_best_step_claim(HOLDS)])
    assert table.results[0].verdict.verdict == HOLDS and table.results[0].complete
    assert not table.results[0].surprising
    wrong = evaluate(str(store), [_best_step_claim(FAILS)])
    assert wrong.results[0].surprising
    monkeypatch.setattr("analysis.claims.registry", lambda: [_best_step_claim(FAILS)])
    assert main(["check", str(store), "--strict"]) == 1
    assert main(["check", str(store)]) == 0
    monkeypatch.setattr("analysis.claims.registry", lambda: [_best_step_claim(HOLDS)])
    assert main(["check", str(store), "--strict"]) == 0
    assert "lsq.optimal_step_best: holds" in capsys.readouterr().out


def test_check_says_how_much_of_a_partial_grid_ran(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A verdict on half a grid must not be labelled like one on the whole grid ("[full]")."""
    block = {"task": "least_squares", "params": {"d_in": 4, "m": 10, "n_iters": 20}}
    run_grid({"name": "lsq_full", "blocks": [block]}, tmp_path, opts())
    # the grid grows to three cells; only the first has run
    grown = load_grid({"name": "lsq_full", "blocks": [{**block, "product": {"lr": [0.01, 0.02]}}, block]})
    ResultStore(tmp_path).write_members([member_row(c, grown.name, "grid", grown.source) for c in grown.cells])

    def check(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
        return Verdict(HOLDS, f"{len(runs)} runs")

    claim = Claim("lsq.partial", "-", "least_squares", ("lsq_full",), "-", check)
    result = evaluate(str(tmp_path), [claim]).results[0]
    assert (result.complete, result.n_finished, result.n_wanted) == (False, 1, 3)
    assert "on lsq_full [full, partial: 1 of 3 runs]" in evaluate(str(tmp_path), [claim]).format()
    assert evaluate(str(tmp_path), [claim]).frame()["size"].tolist() == ["full, partial: 1 of 3 runs"]


def test_registered_claims_run_on_reduced_grids(store: Path) -> None:
    from analysis.linear_resnet.claims import CLAIMS

    results = {r.claim.id: r for r in evaluate(str(store), CLAIMS).results}
    depth = results["003.fig1d.depth"]
    assert depth.grid == "small_fig1d_depth_m200" and depth.reduced and depth.verdict.verdict == HOLDS
    assert not depth.surprising  # reduced grids never fail --strict
    assert results["003.cor34.kappa"].verdict.verdict == "not enough data"


def test_curves_of_a_retried_run_come_from_its_newest_attempt(tmp_path: Path) -> None:
    grid = {
        "name": "g",
        "blocks": [{"task": "least_squares", "params": {"n_iters": 30}, "product": {"lr": [0.01, 0.02]}}],
    }
    run_grid(grid, tmp_path, opts())
    rid = analysis.load(tmp_path, "least_squares")["run_id"].iloc[0]
    run_grid(grid, tmp_path, opts(), only=[rid])  # a second attempt of one run
    cur = analysis.curves(tmp_path, "least_squares")
    assert cur.groupby("run_id").size().to_dict() == {r: 30 for r in cur["run_id"].unique()}
    assert len(cur) == 60


def test_deep_linear_claims_on_reduced_grids(tmp_path: Path) -> None:
    from analysis.deep_linear.claims import CLAIMS

    small = Path(__file__).resolve().parent.parent / "grids" / "deep_linear" / "small"
    for name in ("fig2_depth", "fig5_width", "fig6_order_init"):
        run_grid(small / f"{name}.yaml", tmp_path, opts())
    results = {r.claim.id: r for r in evaluate(str(tmp_path), CLAIMS).results}
    for cid in (
        "002.fig2.sweeps_decrease",
        "002.fig2.depth1_fewest_iterations",
        "002.fig5.narrow_layer",
        "002.fig6.order_rule",
    ):
        assert results[cid].verdict.verdict == HOLDS, (cid, results[cid].verdict)
    assert results["002.fig2.L400_one_sweep"].verdict.verdict == "not enough data"  # the small grid stops at L = 64
    assert results["002.fig3.deep_beats_depth1"].grid is None


def test_runs_that_never_reach_a_threshold_count_as_infinite() -> None:
    from analysis.claims import medians

    runs = pd.DataFrame({"L": [1, 1, 1, 3, 3, 3], "t": [10.0, 12.0, 11.0, 5.0, np.nan, -1.0]})
    med = medians(runs, ["L"], "t")
    assert med[1] == 11.0 and med[3] == np.inf  # not 5.0: two of three runs never got there
