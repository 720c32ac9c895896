"""The claims table (issues 28, 29): `convgrid check` lists the claims whose grids are in the store and `--all`
every registered one; each row carries our number beside the paper's and the spec's reference, the regime it
was decided in and, when undecided, one line saying what it lacks; a verdict short of the paper's budget is
"undecided at this budget" and never a surprise; and the reproduction tables in the docs are generated from the
checked-in claims CSVs, which must list exactly the registered claims with their current statements."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis import repro_table
from analysis.claims import FAILS, HOLDS, NO_DATA, UNDECIDED, Claim, Verdict, evaluate, registry
from runner import run_grid
from runner.cli import main
from tests.options import opts

GRID = {"name": "lsq_claims", "blocks": [{"task": "least_squares", "params": {"n_iters": 30}, "repeat": 2}]}


def _claim(cid: str, grids: tuple[str, ...], verdict: Verdict, expected: str = HOLDS) -> Claim:
    return Claim(
        cid,
        "-",
        "least_squares",
        grids,
        f"statement of {cid}",
        lambda runs, _: verdict,
        expected=expected,  # type: ignore[arg-type]
        regime="inside a made-up theorem",
        spec="spec says 42",
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = str(tmp_path_factory.mktemp("claims") / "res")
    run_grid(GRID, root, opts())
    return root


CLAIMS = [
    _claim("x.decided", ("lsq_claims",), Verdict(HOLDS, "ours 41.5", paper="paper 40")),
    _claim("x.budget", ("lsq_claims",), Verdict(UNDECIDED, "rising", budget="30 of the paper's 3000 steps"), FAILS),
    _claim("x.absent", ("not_run", "small_not_run"), Verdict(HOLDS, "never asked")),
]


def test_check_lists_present_claims_and_all_with_the_flag(
    store: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("analysis.claims.registry", lambda: CLAIMS)
    assert main(["check", store]) == 0
    out = capsys.readouterr().out
    assert "x.decided: holds" in out and "x.budget: undecided at this budget" in out
    assert "x.absent" not in out
    assert "2 claims (1 more without their grids: --all lists them): 1 decided, 1 undecided at their budget" in out
    assert main(["check", store, "--all"]) == 0
    out = capsys.readouterr().out
    assert "x.absent: not enough data" in out
    assert "lacks: needs grid not_run or small_not_run (convgrid run grids/least_squares/not_run.yaml)" in out
    # our number beside the paper's and the spec's reference, and where it was decided
    block = out.split("x.decided: holds")[1].split("x.budget: ")[0]
    assert "ours: ours 41.5" in block and "paper: paper 40" in block and "spec: spec says 42" in block
    assert "regime: inside a made-up theorem" in block
    assert "lacks: a longer budget: 30 of the paper's 3000 steps" in out
    # an undecided verdict is never a surprise, even on a complete full grid expecting otherwise
    assert main(["check", store, "--strict"]) == 0


def test_frame_keeps_its_columns_and_adds_the_new_ones(store: str) -> None:
    frame = evaluate(store, CLAIMS).frame()
    old = ["claim", "grid", "extra", "size", "verdict", "expected", "measured", "paper", "theory", "complete"]
    assert list(frame.columns[: len(old)]) == old
    rows = frame.set_index("claim")
    assert rows.loc["x.decided", ["spec", "regime", "decided", "lacks"]].tolist() == [
        "spec says 42",
        "inside a made-up theorem",
        True,
        "",
    ]
    assert rows.loc["x.budget", "budget"] == "30 of the paper's 3000 steps" and not rows.loc["x.budget", "decided"]
    assert rows.loc["x.absent", "verdict"] == NO_DATA and rows.loc["x.absent", "grid"] == "-"
    assert "\n" not in rows.loc["x.absent", "lacks"]


def test_a_decided_verdict_against_the_expected_one_is_a_surprise(store: str) -> None:
    (result,) = evaluate(store, [_claim("x.wrong", ("lsq_claims",), Verdict(FAILS, "no"))]).results
    assert result.surprising and result.decided


def test_generated_table_round_trips_through_the_docs(store: str) -> None:
    frame = evaluate(store, CLAIMS).frame()[repro_table.CSV_COLUMNS]
    table = repro_table.markdown(frame)
    rows = table.splitlines()
    assert rows[0].startswith("| claim | paper | spec's reference | ours | verdict (expected) |")
    assert len(rows) == 2 + len(CLAIMS)
    assert "**holds** (holds)" in rows[2] and "ours 41.5" in rows[2] and "spec says 42" in rows[2]
    assert "lacks: needs grid not_run" in rows[4]
    doc = "# x\n\nprose\n"
    once = repro_table.with_table(doc, "least_squares", table)
    assert once.startswith(doc.rstrip("\n")) and table in once
    assert repro_table.with_table(once, "least_squares", table) == once  # regenerating changes nothing
    changed = repro_table.with_table(once, "least_squares", "| new |")
    assert "| new |" in changed and table not in changed and changed.count("reproduction table: end") == 1


@pytest.mark.parametrize("task", sorted(p.stem for p in repro_table.CSV_DIR.glob("*.csv")))
def test_docs_table_is_the_one_generated_from_the_claims_csv(task: str) -> None:
    """Drift: the table in docs/<task>.md is what `python -m analysis.repro_table docs <task>` writes from the
    checked-in CSV, and the CSV lists exactly the registered claims of the task with their current statements
    and expected verdicts (a claim changed in code without a new CSV fails here)."""
    csv = repro_table.read_csv(task)
    doc = repro_table.doc_path(task).read_text()
    assert repro_table.with_table(doc, task, repro_table.markdown(csv)) == doc
    mine = {c.id: c for c in registry() if c.task == task}
    assert list(csv["claim"]) == list(mine)
    for row in csv.to_dict("records"):
        # statement, expected verdict, regime, post hoc mark and rule history are the registry's (issue 43)
        code = repro_table.code_columns(mine[row["claim"]])
        assert {k: row[k] for k in code} == code, row["claim"]
    assert set(csv["verdict"]) <= {HOLDS, FAILS, UNDECIDED, NO_DATA}
    # a rule changed after the results with no new decision leaves the claim undecided, saying what it needs
    for claim in mine.values():
        if claim.history and claim.history[-1].needs:
            row = csv.set_index("claim").loc[claim.id]
            assert row["verdict"] == UNDECIDED and row["lacks"] == claim.history[-1].needs, claim.id


def test_the_cli_writes_and_checks_a_docs_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    csv_dir, docs = tmp_path / "claims", tmp_path / "docs"
    docs.mkdir()
    (docs / "least_squares.md").write_text("# least squares\n")
    monkeypatch.setattr(repro_table, "CSV_DIR", csv_dir)
    monkeypatch.setattr(repro_table, "doc_path", lambda task: docs / f"{task}.md")
    store = str(tmp_path / "res")
    run_grid(GRID, store, opts())
    monkeypatch.setattr("analysis.claims.registry", lambda: CLAIMS)
    monkeypatch.setattr(repro_table, "registry", lambda: CLAIMS)
    assert repro_table.main(["csv", store, "least_squares"]) == 0
    written = pd.read_csv(csv_dir / "least_squares.csv", dtype=str, keep_default_na=False)
    assert list(written["claim"]) == [c.id for c in CLAIMS] and list(written.columns) == repro_table.CSV_COLUMNS
    assert repro_table.main(["docs", "least_squares", "--check"]) == 1  # no table yet
    assert repro_table.main(["docs", "least_squares"]) == 0
    assert repro_table.main(["docs", "least_squares", "--check"]) == 0
    assert repro_table.main(["verify", store, "least_squares"]) == 0
    written.loc[0, "verdict"] = FAILS
    written.to_csv(csv_dir / "least_squares.csv", index=False)
    capsys.readouterr()
    assert repro_table.main(["verify", store, "least_squares"]) == 1
    assert "x.decided: CSV does not hold, store holds" in capsys.readouterr().out


def test_a_task_without_a_reproduction_page_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """`docs least_squares --check` crashed with a FileNotFoundError traceback: the calibration learner
    has claims but no reproduction page. It is exit 2 naming the missing file and the tasks that have one."""
    with pytest.raises(SystemExit) as stop:
        repro_table.main(["docs", "least_squares", "--check"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "no docs/least_squares.md" in err and "deep_linear" in err, err


def test_rules_every_claim_obeys_whatever_its_check_says(store: str) -> None:
    """Issue 43: a claim whose randomness is in the problem is refused a verdict on fewer than MIN_DRAWS draws
    (the store has seeds 0 and 1), a verdict on part of a grid is undecided, and a post hoc claim is listed
    outside the tallies."""
    import dataclasses

    from analysis.claims import MIN_DRAWS, RuleChange, _enforced

    drawn = dataclasses.replace(CLAIMS[0], id="x.drawn", draws="seed")
    (result,) = evaluate(store, [drawn]).results
    assert result.verdict.verdict == UNDECIDED and result.complete
    assert result.lacks == f"problem draws: 2 of the {MIN_DRAWS} a claim on a drawn problem needs"
    assert result.verdict.measured.startswith("holds on 2 problem draw(s) (seed): ours 41.5")
    half = _enforced(CLAIMS[0], pd.DataFrame({"seed": [0]}), Verdict(HOLDS, "on half"), 7, 14)
    assert half.verdict == UNDECIDED and half.lacks == "the rest of its grid: 7 of 14 runs finished"
    assert _enforced(CLAIMS[0], pd.DataFrame(), Verdict(HOLDS, "all"), 14, 14).verdict == HOLDS
    narrowed = dataclasses.replace(
        CLAIMS[0],
        id="x.narrowed",
        post_hoc=True,
        history=(RuleChange("2026-11-29", "x >= 2", "does not hold", "narrowed after the results"),),
    )
    table = evaluate(store, [CLAIMS[0], narrowed])
    assert table.summary().startswith("1 claims (0 more without their grids: --all lists them): 1 decided")
    assert table.summary().endswith("; 1 post hoc or investigations listed outside these counts")
    frame = table.frame()[repro_table.CSV_COLUMNS].astype(str)
    assert repro_table.tallies(frame) == {
        HOLDS: 1,
        FAILS: 0,
        UNDECIDED: 0,
        NO_DATA: 0,
        "post hoc": 1,
        "surprises": 0,
    }
    md = repro_table.markdown(frame)
    assert "post hoc, outside the tallies" in md.splitlines()[3]
    assert "- `x.narrowed`: 2026-11-29: was 'x >= 2' (does not hold); changed because narrowed after" in md
    assert "rule changed 2026-11-29: was 'x >= 2'" in table.format()


def test_reproduction_page_tallies_are_the_csvs() -> None:
    """docs/reproduction.md's tally table is what `python -m analysis.repro_table tallies` prints from the CSVs."""
    page = (repro_table.REPO / "docs" / "reproduction.md").read_text()
    assert repro_table.tallies_markdown() in page


TWIN_SAYS = "Small twin of lsq_claims for tests: 10 steps, one seed; exercises the path."


def test_a_reduced_twin_shows_its_own_regime_and_check_and_report_tally_alike(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45, 9 (a): a claim decided on the reduced twin prints the twin's setting (its grid file's
    description), not the full grid's regime; (b) the report counts decided / undecided as `check` does
    (it counted "undecided at this budget" as decided)."""
    import yaml

    from analysis.report import build_report

    twin = tmp_path / "small_lsq_claims.yaml"
    twin.write_text(
        yaml.safe_dump(
            {
                "name": "small_lsq_claims",
                "description": TWIN_SAYS,
                "blocks": [{"task": "least_squares", "params": {"n_iters": 10}}],
            }
        )
    )
    run_grid(str(twin), store, opts())
    claims = [
        *CLAIMS,
        _claim("x.twin", ("not_run", "small_lsq_claims"), Verdict(HOLDS, "on the twin")),
        _claim("x.nodata", ("lsq_claims",), Verdict(NO_DATA, "too few runs")),
    ]
    monkeypatch.setattr("analysis.claims.registry", lambda: claims)
    assert main(["check", store]) == 0
    out = capsys.readouterr().out
    block = out.split("x.twin: holds")[1]
    assert f"regime: reduced twin small_lsq_claims: {TWIN_SAYS}" in block
    assert "inside a made-up theorem" not in block.split("x.nodata")[0]
    summary = out.strip().splitlines()[-1]
    assert "2 decided, 1 undecided at their budget, 1 without enough data" in summary
    build_report(store, tmp_path / "report")
    page = (tmp_path / "report" / "report.md").read_text()
    assert "The 4 claims of the grids in this store: 2 decided, 1 undecided at their budget, 1 without" in page
    assert summary.split("lists them): ")[1] in " ".join(page.split())  # the same sentence


def test_draws_count_the_problem_and_spare_only_reduced_grids() -> None:
    """Issue 43: a data seed left unset is the run's seed; "a+b" counts combinations; a reduced grid keeps its
    verdict (it only exercises the path), a full grid on 2 draws does not; an exemption must name a claim."""
    import dataclasses

    from analysis.claims import _enforced, n_draws, on_drawn_problems

    runs = pd.DataFrame({"seed": [0, 1, 2, 0], "data_seed": [None, None, None, None], "target_seed": [5, 5, 5, 5]})
    assert n_draws(runs, "data_seed") == 3  # unset: the seeds 0, 1, 2
    assert n_draws(runs.assign(data_seed=[7, 7, 7, 7]), "data_seed") == 1  # one fixed draw whatever the seed
    assert n_draws(runs, "target_seed+data_seed") == 3 and n_draws(runs, "target_seed") == 1
    drawn = dataclasses.replace(CLAIMS[0], draws="data_seed")
    two = runs.iloc[[0, 1]]
    assert _enforced(drawn, two, Verdict(HOLDS, "x"), 2, 2).verdict == UNDECIDED
    assert _enforced(drawn, two, Verdict(HOLDS, "x"), 2, 2, reduced=True).verdict == HOLDS
    assert _enforced(drawn, runs, Verdict(FAILS, "x"), 4, 4).verdict == FAILS
    with pytest.raises(ValueError, match="x.nowhere"):
        on_drawn_problems(CLAIMS, "seed", {"x.nowhere": "a typo"})


def _grid_draws(task: str, grid: str, draws: str) -> int:
    from analysis.claims import n_draws
    from runner.grid.spec import load_grid

    path = Path(repro_table.REPO) / "grids" / task / f"{grid}.yaml"
    cells = pd.DataFrame([c.params.model_dump() for c in load_grid(path).cells])
    return n_draws(cells, draws)


@pytest.mark.parametrize("task", ["ldminv", "deep_linear", "linear_resnet", "hierarchical", "l2o_gd"])
def test_no_recorded_verdict_rests_on_fewer_draws_than_the_rule_asks(task: str) -> None:
    """Issue 43: every claim that declares its problem draw and is decided in its CSV was decided on a full grid
    whose file runs at least MIN_DRAWS draws (counted from the grid's cells, as `evaluate` counts its runs); a
    grid of fewer draws leaves the claim undecided, its history saying so (fails on the 2026-11-27 rows of the
    2-seed grids fig1_k, fig1_kl, fig1_l and c6_kernels)."""
    from analysis.claims import MIN_DRAWS

    rows = repro_table.read_csv(task).set_index("claim")
    for claim in (c for c in registry() if c.task == task and c.draws):
        row = rows.loc[claim.id]
        if row["verdict"] in (HOLDS, FAILS):
            assert row["size"] == "full", (claim.id, row["size"])
            assert _grid_draws(task, row["grid"], claim.draws) >= MIN_DRAWS, (claim.id, row["grid"])
