"""The report reads like a results section (issue 28): it opens with what ran (grids and studies,
status counts, failures grouped by reason with their run ids), lists the claims of the grids in the
store with ours beside the paper's and the spec's (an undecided one says what it lacks), and gives
each study a page of Optuna's own plots."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from analysis.claims import HOLDS, Claim, Verdict
from analysis.report import build_report
from analysis.studies import journal_path, load_study
from analysis.summary import failure_groups, reason_key
from runner import run_grid
from runner.tune import tune
from tests.options import opts
from tests.test_report import parse

ROOT = Path(__file__).resolve().parents[1]
LSQ = {
    "name": "lsq_small",
    "blocks": [
        {"task": "least_squares", "params": {"d_in": 4, "m": 12, "n_iters": 200}, "product": {"lr": [0.05, 5.0]}}
    ],
}
FAULTY = {
    "name": "faulty_grid",
    "blocks": [
        {"task": "faulty", "params": {"fail": True}, "product": {"x": [1.0, 2.5, 3.0]}},  # one reason, three runs
        {"task": "faulty", "params": {"poison": True}},  # a summary the store cannot take: another reason
        {"task": "faulty", "params": {"x": 4.0}},
    ],
}


def _claims() -> list[Claim]:
    def check(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
        return Verdict(HOLDS, f"{len(runs)} runs measured", paper="the paper's number", spec="the spec's number")

    return [
        Claim("lsq.here", "-", "least_squares", ("lsq_small",), "decided here", check),
        Claim("lsq.absent", "-", "least_squares", ("lsq_full",), "its grid never ran", check),
        Claim("lsq.lacks", "-", "least_squares", ("lsq_small",), "needs a study", check, extra=("lsq_study",)),
    ]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("store")
    run_grid(LSQ, root, opts())
    run_grid(FAULTY, root, opts())
    tune(ROOT / "studies" / "least_squares" / "gd_step.yaml", root, opts(), n_trials=10, parallel=1)
    out = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("analysis.claims.registry", _claims)
        build_report(str(root), out)
    return root, out


def test_the_page_opens_with_what_ran(report: tuple[Path, Path]) -> None:
    _, out = report
    page = parse((out / "report.html").read_text())
    headings = [h.all_text() for h in page.find("h2")]
    assert headings[:2] == ["What ran", "Claims"]
    md = (out / "report.md").read_text()
    assert "2 grids and 1 study" in md
    first_table = page.find("table")[0]
    rows = {tr.find("td")[0].all_text(): [td.all_text() for td in tr.find("td")] for tr in first_table.find("tr")[1:]}
    assert set(rows) == {"faulty_grid", "lsq_small", "least_squares_gd_step"}
    assert rows["faulty_grid"][2:6] == ["5", "1", "0", "4"]  # cells, ok, diverged, failed
    assert rows["lsq_small"][3:5] == ["1", "1"]  # lr 5.0 diverges
    assert rows["least_squares_gd_step"][-1] == "Optuna study"


def test_a_run_two_grids_share_is_counted_once_in_the_headline(tmp_path: Path) -> None:
    """Two grids asking for one cell (and a run rerun with --only belongs to its grid and to `rerun`): the
    headline counts distinct runs and their statuses (it added up the grids' rows: 3 runs, ok 2), the table
    counts the run under each grid, and the line says why the two differ."""
    shared = {
        "name": "shared",
        "blocks": [{"task": "least_squares", "params": {"d_in": 4, "m": 12, "n_iters": 200, "lr": 0.05}}],
    }
    run_grid(LSQ, tmp_path / "store", opts())
    run_grid(shared, tmp_path / "store", opts())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("analysis.claims.registry", list)
        report = build_report(str(tmp_path / "store"), tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert report.totals == {"ok": 1, "diverged": 1}
    assert "2 grids and 0 studies, 2 runs asked for: ok 1, diverged 1 (the table counts a run once per grid" in md
    assert "3 rows)" in md


def test_the_command_counts_grids_and_studies_as_the_page_does(
    report: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`convgrid report` named every section a grid ('3 grids' for two grids and a study)."""
    from runner.cli import main

    root, _ = report
    monkeypatch.setattr("analysis.claims.registry", _claims)
    assert main(["report", str(root), "--out", str(tmp_path)]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "(2 grids and 1 study, " in line and "2 grids and 1 study" in (tmp_path / "report.md").read_text()


def test_failures_are_grouped_by_reason_with_their_run_ids(report: tuple[Path, Path]) -> None:
    root, out = report
    import analysis

    failed = analysis.load(root, "faulty", statuses=["failed"])
    page = parse((out / "report.html").read_text())
    items = [li.all_text() for li in page.find("li") if li.find("code") and li.find("code")[0].all_text() == "faulty"]
    assert len(items) == 2  # two reasons
    asked, poison = items
    assert asked.startswith("faulty, 3 runs: RuntimeError: asked to fail with x=")
    fail_ids = failed.loc[failed["fail"], "run_id"].str[:12]
    assert all(rid in asked for rid in fail_ids) and not any(rid in poison for rid in fail_ids)
    assert poison.startswith("faulty, 1 run: ")
    assert failed.loc[~failed["fail"], "run_id"].iloc[0][:12] in poison


def test_failure_reasons_ignore_numbers_only() -> None:
    errors = [
        ("t", "a", "ValueError: diverged at step 12 (lr 0.5)"),
        ("t", "b", "ValueError: diverged at step 40 (lr 1e-3)"),
        ("t", "c", "KeyError: 'lr'"),
        ("u", "d", "ValueError: diverged at step 3 (lr 2)"),
    ]
    groups = failure_groups(errors)
    assert [(g.task, g.run_ids) for g in groups] == [("t", ["a", "b"]), ("t", ["c"]), ("u", ["d"])]
    assert groups[0].reason == "ValueError: diverged at step 12 (lr 0.5)"
    assert reason_key("timeout after 3.25 s") == reason_key("timeout after 10 s") != reason_key("timeout")


def test_claims_of_the_grids_present_ours_beside_paper_and_spec(report: tuple[Path, Path]) -> None:
    _, out = report
    page = parse((out / "report.html").read_text())
    (claims,) = [t for t in page.find("table") if t.find("th")[0].all_text() == "claim"]
    headers = [th.all_text() for th in claims.find("th")]
    assert headers == ["claim", "grid", "size", "verdict", "expected", "ours", "paper", "spec"]
    rows = {tr.find("td")[0].all_text(): [td.all_text() for td in tr.find("td")] for tr in claims.find("tr")[1:]}
    assert set(rows) == {"lsq.here", "lsq.lacks"}  # lsq.absent's grid is not in the store
    here = dict(zip(headers, rows["lsq.here"], strict=True))
    assert (here["ours"], here["paper"], here["spec"]) == ("2 runs measured", "the paper's number", "the spec's number")
    lacks = dict(zip(headers, rows["lsq.lacks"], strict=True))
    assert lacks["verdict"] == "not enough data" and lacks["ours"].startswith("lacks: not in the store: lsq_study")


def test_a_study_gets_optunas_own_plots(report: tuple[Path, Path]) -> None:
    _, out = report
    folder = out / "figures" / "least_squares_gd_step"
    stems = sorted(p.stem for p in folder.glob("*.png"))
    # pruning ran: intermediate values too; one searched param (lr): no importances, which would be one bar at 1
    kinds = ["history", "intermediate", "slice"]
    assert stems == [f"least_squares_gd_step_{k}" for k in kinds]
    assert all((folder / f"{stem}.svg").exists() for stem in stems)
    # the intermediate values are what the runs reported to the pruner: log10 of the curve's err
    intermediate = (folder / "least_squares_gd_step_intermediate.svg").read_text()
    assert ">log10 err<" in intermediate and ">Intermediate Value<" not in intermediate  # not Optuna's label
    md = (out / "report.md").read_text()
    study = md.split("## Study least_squares_gd_step (least_squares)", 1)[1].split("\n## ", 1)[0]
    assert "Trials: COMPLETE" in study and "storage `journal:optuna.journal`" in study
    assert "Best trials" in study and "No figure module" not in study
    assert all(f"figures/least_squares_gd_step/least_squares_gd_step_{k}.png" in study for k in kinds)


def test_a_study_in_an_rdb_is_named_not_drawn(tmp_path: Path) -> None:
    """An RDB's password is not stored: the report cannot open it and says where the study is."""
    assert journal_path(tmp_path, "journal:optuna.journal") == tmp_path / "optuna.journal"
    assert journal_path(tmp_path, "journal:/abs/x.journal") == Path("/abs/x.journal")
    assert journal_path("s3://bucket/prefix", "journal:optuna.journal") is None
    with pytest.raises(ValueError, match=r"postgresql://u:\*\*\*@h/db is not a journal file"):
        load_study(tmp_path, "s", "postgresql://u:***@h/db")


@pytest.mark.parametrize("low, high", [(0.05, 0.5), (0.01, 0.6), (1e-5, 5e-4), (0.2, 0.35)])
def test_the_slice_plot_of_a_log_param_keeps_its_tick_labels_apart(low: float, high: float) -> None:
    """A log axis from 0.05 to 0.5 labelled its minor ticks; on the report's page '3×10⁻¹' ran into
    '4×10⁻¹'. Drawn as the report draws it, the labels on the axis do not overlap, and there are some."""
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import optuna
    from optuna.visualization import matplotlib as vis

    from analysis.studies import _figure_of, _fit
    from analysis.style import context

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial({"lr": low})
    study.enqueue_trial({"lr": high})
    study.optimize(lambda t: t.suggest_float("lr", low, high, log=True) ** 2, n_trials=40)
    with context(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna marks its matplotlib plots experimental
        fig = _figure_of(vis.plot_slice(study))
        _fit(fig)
        fig.canvas.draw()
        ax = fig.axes[0]
        left, right = ax.get_xlim()
        shown = [
            t
            for t in ax.get_xticklabels(which="both")
            if t.get_visible() and t.get_text() and left <= t.get_position()[0] <= right
        ]
        boxes = sorted((t.get_window_extent() for t in shown), key=lambda b: b.x0)
    matplotlib.pyplot.close(fig)
    assert len(boxes) >= 2, [t.get_text() for t in shown]
    assert all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:], strict=False)), [t.get_text() for t in shown]


def test_a_study_section_gives_its_baselines_and_report_metrics(report: tuple[Path, Path]) -> None:
    """Issue 45: what the study is for is on its page: the file's description, its baselines with their
    params and status, and its `report:` metrics beside the best trials and the baselines."""
    _, out = report
    md = (out / "report.md").read_text()
    study = md.split("## Study least_squares_gd_step (least_squares)", 1)[1].split("\n## ", 1)[0]
    assert "*TPE finds 2/(lambda_max+lambda_min) for GD on least squares*" in study
    best, baselines = study.split("Baselines (", 1)
    assert "| lr_opt_theory | lr_used |" in best  # the report: metrics of each best trial's run
    header, _, row = baselines.split("\n")[2:5]
    assert header.startswith("| baseline | params | status | lr_opt_theory | lr_used | run id |")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "1" and cells[1] == '{"lr": null, "lr_rule": "optimal"}' and cells[2] == "ok"
    assert float(cells[3]) == pytest.approx(float(cells[4]))  # the optimal rule uses the theory's step


def test_a_studys_history_draws_its_baselines_as_reference_lines(report: tuple[Path, Path]) -> None:
    """The history plot shows what the tuned trials are to beat: each baseline's objective, as Optuna was
    told a trial's (log10 of err_final here), a dashed line named in the legend."""
    _, out = report
    svg = (out / "figures" / "least_squares_gd_step" / "least_squares_gd_step_history.svg").read_text()
    assert ">baseline 1<" in svg and ">least_squares_gd_step: optimisation history<" in svg
    # the study file's theory value of its searched lr (0.45 = 2/(lambda_max+lambda_min)), on the lr slice
    slice_svg = (out / "figures" / "least_squares_gd_step" / "least_squares_gd_step_slice.svg").read_text()
    assert ">theory: 2/(λmax+λmin)<" in slice_svg


def test_history_and_slice_are_drawn_in_the_house_style_with_every_outcome_and_reference(tmp_path: Path) -> None:
    """Issue 45, item 4: the history and slice plots read back in the house style (white axes, the palette,
    no Optuna grey), every trial's outcome counted in the legend (pruned trials, which have no value, as
    ticks), the baselines' and the theory's values as dashed lines where they belong."""
    import warnings

    import matplotlib
    import optuna

    from analysis.figures import drawn
    from analysis.studies import draw_study
    from analysis.style import COLORS

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="toy", sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(trial: optuna.Trial) -> float:
        lr = trial.suggest_float("lr", 0.01, 1.0, log=True)
        if trial.number % 4 == 3:
            raise optuna.TrialPruned()
        return (lr - 0.3) ** 2

    study.optimize(objective, n_trials=12)
    with drawn() as figures, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        paths, declined = draw_study(
            study,
            tmp_path,
            {},
            references=[("baseline 1", 0.05), ("theory", 0.0)],
            param_references=[("opt", "lr", 0.3)],
        )
    assert not declined and sorted(p.stem for p in paths if p.suffix == ".png") == ["toy_history", "toy_slice"]
    history, slice_ = (f.axes[0] for f in figures)
    for ax in (history, slice_):
        assert matplotlib.colors.to_hex(ax.get_facecolor()) == "#ffffff"  # ggplot's is #e5e5e5
    assert history.get_title() == "toy: optimisation history" and history.get_xlabel() == "trial"
    labels = [t.get_text() for t in history.get_legend().get_texts()]
    assert labels == ["complete (9)", "best so far", "pruned (3, no value)", "baseline 1", "theory"]
    points = history.get_lines()[0]
    assert matplotlib.colors.to_hex(points.get_color()) == COLORS[0].lower() and len(points.get_xdata()) == 9
    dashed = {line.get_label(): line.get_ydata()[0] for line in history.get_lines() if line.get_linestyle() == "--"}
    assert dashed == {"baseline 1": 0.05, "theory": 0.0}
    best = history.get_lines()[1].get_ydata()
    assert list(best) == sorted(best, reverse=True) and best[-1] == min(
        t.value for t in study.trials if t.value is not None
    )
    assert slice_.get_xscale() == "log" and slice_.get_xlabel() == "lr"
    (opt,) = [line for line in slice_.get_lines() if line.get_label() == "opt"]
    assert opt.get_xdata()[0] == 0.3 and opt.get_linestyle() == "--"


def test_a_study_files_theory_values_go_to_the_plot_of_their_axis() -> None:
    """`reference:` of an objective's metric lands on the history as Optuna is told that objective (log10
    where `log: true`), beside the baselines; one of a searched param on that param's slice."""
    from analysis.report import GridSection, theory_references

    section = GridSection("s", "least_squares", 1, {}, False, kind="study")
    section.references.append(("baseline 1", -20.0))
    spec = {
        "objective": {"metric": "err_final", "log": True},
        "reference": [
            {"label": "floor", "metric": "err_final", "value": 1e-21},
            {"label": "theory step", "param": "lr", "value": 0.45},
        ],
    }
    theory_references(section, spec)
    assert section.references == [("baseline 1", -20.0), ("floor", pytest.approx(-21.0))]
    assert section.param_references == [("theory step", "lr", 0.45)]
    spec["objective"] = [{"metric": "err_final"}, {"metric": "flops"}]  # several objectives, not logged
    section.references.clear()
    theory_references(section, spec)
    assert section.references == [("floor", 1e-21)]
