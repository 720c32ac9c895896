"""`convgrid report RESULTS --out DIR`: a results section as one page. It opens with what ran (grids and
studies, their status counts, the failures grouped by reason with their run ids) and the claims of the
grids in the store (ours beside the paper's and the spec's); then each grid with its figures and the
tables of the claims it decided, each study with Optuna's own plots (analysis.studies), and provenance.

The Markdown is the single source: the HTML page is that Markdown rendered by Python-Markdown (tables,
fenced code) inside a Jinja template (analysis/templates/report.html.j2), with each figure's path
replaced by a data: URI so that the page fetches nothing (analysis.markdown escapes free text).
"""

from __future__ import annotations

import base64
import html as html_lib
import json
import math
import os
import struct
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import markdown as markdown_lib
import markupsafe
import pandas as pd

from analysis.claims import ClaimsTable, evaluate
from analysis.figures import figure_for, is_reduced
from analysis.load import curves, finished, grid_file, load, members
from analysis.markdown import code_md, escape_md, header, row, table
from analysis.studies import StudyFigures, study_figures, trials_frame
from analysis.style import DPI
from analysis.summary import claim_rows, failure_groups
from analysis.sweep_figures import declared_axes, sweep_figures
from runner.errors import redact
from runner.store import ResultStore
from runner.store.status import store_status
from tasks.status import ALL_STATUSES

__all__ = ["GridSection", "Report", "build_report", "code_md", "escape_md"]

MARKDOWN_EXTENSIONS = ("tables", "fenced_code")
STATUS_COLUMNS = (*ALL_STATUSES, "missing")
RERUN_GRID = "rerun"  # what `convgrid run --only` without a grid file links its runs to
CSS_DPI = 96  # a CSS pixel is 1/96 inch
MAX_IDS = 20  # run ids listed per failure reason; the rest are counted
DEFAULT_FIGURES = "every field against the swept params"  # what a section drawn by analysis.sweep_figures says
REDUCED_NOTE = "A verdict on a reduced grid only exercises the path; the paper's claim is decided on the full grid."


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _inline_image(path: Path) -> str:
    """The PNG as an <img> of its data, shown at its size in print (DPI px per inch) so that every
    figure's text has one size on the page, whatever the figure's width (narrower screens scale it)."""
    width = struct.unpack(">I", path.read_bytes()[16:20])[0]  # the PNG header's width
    css_px = round(width * CSS_DPI / DPI)
    return f'<img alt="{html_lib.escape(path.stem)}" src="{_data_uri(path)}" width="{css_px}">'


def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("analysis", "templates"), autoescape=True)
    return env.get_template("report.html.j2")


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {words or word + 's'}"


@dataclass
class GridSection:
    grid: str
    task: str
    cells: int
    counts: dict[str, int]
    reduced: bool
    figure: str | None = None
    images: list[Path] = field(default_factory=list)
    note: str = ""
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)  # (title, table) of the claims it decided
    kind: str = "grid"  # or "study": its runs were asked for by an Optuna study
    study: StudyFigures | None = None
    description: str = ""  # the grid or study file's own `description:`
    axes: list[str] | None = None  # the params its file sweeps, where the file is there to read
    baselines: pd.DataFrame | None = None  # a study's baseline runs: their params, status, `report:` metrics
    metrics: list[str] = field(default_factory=list)  # a study's `report:` metrics
    runs_metrics: pd.DataFrame | None = None  # run_id and those metrics, of every run of the study
    references: list[tuple[str, float]] = field(default_factory=list)  # a study's baselines, as Optuna's values
    # the study file's `reference:` values of a searched param: (label, param, value), on its slice
    param_references: list[tuple[str, str, float]] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.kind == "study":
            return "Optuna study"
        if self.grid == RERUN_GRID:
            return "reruns of stored runs (`run --only`)"
        return "reduced (CI/demo size, not a reproduction)" if self.reduced else "full grid"


@dataclass
class Report:
    root: str
    sections: list[GridSection]
    failures: list[tuple[str, str, str]]
    provenance: dict[str, list[str]]
    claims: ClaimsTable = field(default_factory=ClaimsTable)
    # the status of every distinct run the grids and studies asked for (a run two grids share, such as one
    # rerun with --only, counted once; the table below counts it once per grid)
    totals: dict[str, int] = field(default_factory=dict)
    logged: set[str] = field(default_factory=set)  # run ids with a stored log (runner.store.logs)
    diverged_logged: list[tuple[str, str]] = field(default_factory=list)  # (task, run id)

    def markdown(self, out: Path, image: Callable[[Path], str] | None = None) -> str:
        """The report as Markdown; a figure is `image(path)` (default: a Markdown image of the path
        relative to `out`)."""
        # quoted: a space or parenthesis in a folder name would end the Markdown link early
        src = image or (lambda p: f"![{escape_md(p.stem)}]({urllib.parse.quote(os.path.relpath(p, out))})")
        lines = [f"# convgrid report: {code_md(self.root)}", ""]
        lines += self._what_ran() + self._failures() + self._claims()
        for s in self.sections:
            lines += self._study(s, src) if s.kind == "study" else self._grid(s, src)
        lines += ["", "## Provenance", ""]
        lines += [f"- {escape_md(k)}: {', '.join(code_md(v) for v in vs)}" for k, vs in self.provenance.items()]
        return "\n".join(lines) + "\n"

    def contents(self) -> str:
        """'2 grids and 1 study': what the report covers (the command's line and the report's own say the same)."""
        studies = sum(s.kind == "study" for s in self.sections)
        grids = len(self.sections) - studies
        return f"{_plural(grids, 'grid')} and {_plural(studies, 'study', 'studies')}"

    def _what_ran(self) -> list[str]:
        counts = ", ".join(f"{k} {self.totals[k]}" for k in STATUS_COLUMNS if self.totals.get(k))
        runs, rows = sum(self.totals.values()), sum(s.cells for s in self.sections)
        shared = f" (the table counts a run once per grid that asked for it: {rows} rows)" if rows != runs else ""
        lines = ["## What ran", ""]
        lines.append(
            f"{self.contents()}, {_plural(runs, 'run')} asked for" + (f": {counts}" if counts else "") + f"{shared}."
        )
        lines += ["", *header(["grid", "task", "cells", *STATUS_COLUMNS, "kind"])]
        for s in self.sections:
            lines.append(row([s.grid, s.task, s.cells, *(s.counts.get(k, 0) for k in STATUS_COLUMNS), s.label]))
        return lines

    def _failures(self) -> list[str]:
        if not self.failures:
            return self._logs()
        groups = failure_groups(self.failures)
        lines = ["", "### Failures by reason", ""]
        lines.append(f"{_plural(len(self.failures), 'run')} failed or timed out, for {len(groups)} reasons:")
        lines.append("")
        for g in groups:
            ids = ", ".join(code_md(rid[:12]) for rid in g.run_ids[:MAX_IDS])
            more = f" and {len(g.run_ids) - MAX_IDS} more" if len(g.run_ids) > MAX_IDS else ""
            lines.append(
                f"- {code_md(g.task)}, {_plural(len(g.run_ids), 'run')}: {escape_md(g.reason)}. Run ids: {ids}{more}"
            )
        lines += ["", "`convgrid run --only RUN_ID --executor local` reruns one in process, with its traceback."]
        return lines + self._logs()

    def _logs(self) -> list[str]:
        """Where to read what the failed and diverged runs printed, warned and logged."""
        failed = [rid for _, rid, _ in self.failures if rid in self.logged]
        if not failed and not self.diverged_logged:
            return []
        lines = ["", "`convgrid logs RUN_ID` prints what a run printed, warned and logged, with its error:"]
        if failed:
            ids = ", ".join(code_md(rid[:12]) for rid in failed[:MAX_IDS])
            more = f" and {len(failed) - MAX_IDS} more" if len(failed) > MAX_IDS else ""
            lines.append(f"kept for {_plural(len(failed), 'failed run')} ({ids}{more})")
        if self.diverged_logged:
            ids = ", ".join(code_md(rid[:12]) for _, rid in self.diverged_logged[:MAX_IDS])
            more = f" and {len(self.diverged_logged) - MAX_IDS} more" if len(self.diverged_logged) > MAX_IDS else ""
            lines.append(
                f"{'and' if failed else 'kept'} for {_plural(len(self.diverged_logged), 'diverged run')} ({ids}{more})."
            )
        return lines

    def _claims(self) -> list[str]:
        rows = claim_rows(self.claims)
        if rows.empty:
            if not self.claims.results:
                return []
            none = "No registered claim reads the grids in this store (`convgrid check --all` lists them)."
            return ["", "## Claims", "", none]
        tally = self.claims.tally()
        lines = ["", "## Claims", ""]
        lines.append(  # the counts `convgrid check` prints (ClaimsTable.tally): one definition
            f"The {tally.claims} claims of the grids in this store: {tally.text()} "
            "(`convgrid check --all` lists every claim). Ours is the number measured here."
        )
        lines += ["", *table(rows)]
        if rows["size"].astype(str).str.startswith("reduced").any():
            lines += ["", REDUCED_NOTE]
        return lines

    def _grid(self, s: GridSection, src: Callable[[Path], str]) -> list[str]:
        lines = ["", f"## {escape_md(s.grid)} ({escape_md(s.task)})", ""]
        if s.description:
            lines += [f"*{escape_md(s.description)}*", ""]
        if s.figure:
            lines.append(f"Figure {code_md(s.figure)}." + (f" {escape_md(s.note)}" if s.note else ""))
        elif s.note:
            lines.append(escape_md(s.note))
        if s.images:  # one paragraph: figures sit side by side where the page is wide enough
            lines += ["", *(src(img) for img in s.images)]
        for title, claim_table in s.tables:
            lines += ["", escape_md(title), "", *table(claim_table)]
        return lines

    def _study(self, s: GridSection, src: Callable[[Path], str]) -> list[str]:
        lines = ["", f"## Study {escape_md(s.grid)} ({escape_md(s.task)})", ""]
        if s.description:
            lines += [f"*{escape_md(s.description)}*", ""]
        study = s.study
        if study is not None:
            states = ", ".join(f"{k} {v}" for k, v in study.states.items()) or "none recorded"
            storage = f"; storage {code_md(study.storage)}" if study.storage else ""
            lines.append(
                f"Trials: {escape_md(states)}{storage}. Plots, titled with the study's name: the history (every "
                "trial's outcome counted; baselines and the study file's `reference:` values as dashed lines), "
                "each searched param's slice, and the intermediate values coloured by how each trial ended; "
                "importances and Pareto fronts are Optuna's (`optuna.visualization`)."
            )
            if study.best is not None and not study.best.empty:
                best = study.best.rename(columns={"params_json": "params", "run_id": "run id"})
                if s.metrics and s.runs_metrics is not None:  # the study's `report:` metrics of each trial's run
                    best = best.merge(s.runs_metrics, how="left", left_on="run id", right_on="run_id").drop(
                        columns="run_id"
                    )
                lines += ["", "Best trials (value: what Optuna was told, the study's objective):", "", *table(best)]
        if s.baselines is not None and not s.baselines.empty:
            lines += ["", "Baselines (the study file's `baselines:`, run beside the trials):", "", *table(s.baselines)]
        if s.note:
            lines += ["", escape_md(s.note)]
        if s.images:  # one paragraph: figures sit side by side where the page is wide enough
            lines += ["", *(src(img) for img in s.images)]
        return lines

    def html(self, out: Path) -> str:
        """One self-contained page: the Markdown rendered, figures inlined as data: URIs."""
        text = self.markdown(out, image=_inline_image)
        body = markdown_lib.markdown(text, extensions=list(MARKDOWN_EXTENSIONS), output_format="html")
        return _template().render(title=f"convgrid report: {self.root}", body=markupsafe.Markup(body)) + "\n"


def _folder(name: str) -> str:
    """A folder name for a grid or study (a swept study's name holds brackets and '=')."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _draw(root: str, section: GridSection, runs: pd.DataFrame, fig_dir: Path, trials: pd.DataFrame) -> None:
    """The section's figures: Optuna's plots for a study, the learner's figure for a grid."""
    if section.kind == "study":
        section.study = study_figures(
            root,
            section.grid,
            trials,
            fig_dir / _folder(section.grid),
            references=section.references,
            param_references=section.param_references,
        )
        section.images, section.note = section.study.images, section.study.note
        return
    found = figure_for(section.task, section.grid)
    done = finished(runs)
    out = fig_dir / _folder(section.grid)
    if done.empty:
        section.figure, section.note = (found[0] if found else None), "No finished runs to draw."
    elif found is None:  # no paper's figure: every field against the swept params (analysis.sweep_figures)
        section.figure = DEFAULT_FIGURES
        title = f"{section.grid} ({section.task})"
        section.images, section.note = sweep_figures(
            done, curves(root, section.task, runs=done), out / _folder(section.task), title, section.axes
        )
    else:
        section.figure = found[0]
        section.images = found[1](done, curves(root, section.task, runs=done), out)


def _shown(value: Any) -> Any:
    """A metric as a table shows it: a null (a threshold never reached, a metric not measured) as '-'."""
    return "-" if value is None or (not isinstance(value, list | tuple) and pd.isna(value)) else value


def study_extras(section: GridSection, spec: dict[str, Any], group: pd.DataFrame, runs: pd.DataFrame) -> None:
    """A study section's `report:` metrics (of every run) and its baselines (members' block i is the
    study file's i-th baseline): their params as the file gives them, status and those metrics."""
    wanted = spec.get("report")
    section.metrics = [str(m) for m in (wanted if isinstance(wanted, list) else []) if str(m) in runs]
    if "run_id" in runs:
        section.runs_metrics = runs[["run_id", *section.metrics]].astype(object).map(_shown)
    given = [b.get("params", {}) if isinstance(b, dict) else {} for b in spec.get("baselines") or []]
    rows = []
    for block, run in group[group["block"] > 0].sort_values("block")[["block", "run_id"]].itertuples(index=False):
        found = runs[runs["run_id"] == run] if "run_id" in runs else runs.iloc[:0]
        status = str(found["status"].iloc[0]) if not found.empty else "missing"
        params = given[int(block) - 1] if 0 < int(block) <= len(given) else {}
        row = {"baseline": int(block), "params": json.dumps(params, sort_keys=True), "status": status}
        row |= {m: _shown(found[m].iloc[0]) if not found.empty else "-" for m in section.metrics}
        rows.append({**row, "run id": run})
    section.baselines = pd.DataFrame(rows) if rows else None
    objective = spec.get("objective")
    if isinstance(objective, dict) and objective.get("metric") in runs:
        # each baseline's objective as Optuna was told a trial's (log10 where the study says `log: true`)
        metric, log = str(objective["metric"]), bool(objective.get("log"))
        for block, run in group[group["block"] > 0].sort_values("block")[["block", "run_id"]].itertuples(index=False):
            found = runs.loc[runs["run_id"] == run, metric].astype(float)
            value = float(found.iloc[0]) if not found.empty else math.nan
            if math.isfinite(value) and (value > 0 or not log):
                section.references.append((f"baseline {int(block)}", math.log10(value) if log else value))
    theory_references(section, spec)


def theory_references(section: GridSection, spec: dict[str, Any]) -> None:
    """The study file's `reference:` values (checked when it was run: runner.tune.study_checks): an objective
    metric's beside the baselines on the history, as Optuna is told it (log10 where the objective says so);
    a searched param's on its slice."""
    objectives = spec.get("objective")
    logged = {
        str(o.get("metric")): bool(o.get("log"))
        for o in (objectives if isinstance(objectives, list) else [objectives])
        if isinstance(o, dict)
    }
    for ref in spec.get("reference") or []:
        if not isinstance(ref, dict) or not isinstance(ref.get("value"), int | float):
            continue
        label, value = str(ref.get("label", "reference")), float(ref["value"])
        if ref.get("param") is not None:
            section.param_references.append((label, str(ref["param"]), value))
        elif str(ref.get("metric")) in logged:
            log = logged[str(ref.get("metric"))]
            if math.isfinite(value) and (value > 0 or not log):
                section.references.append((label, math.log10(value) if log else value))


def build_report(root: str | os.PathLike[str], out: str | os.PathLike[str]) -> Report:
    out_dir = Path(out)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    member_frame = members(root)
    # the same counts and failures `convgrid status` prints: one definition of what a grid's state is
    status = store_status(ResultStore(root), verify=False)
    trials = trials_frame(root)
    sections: list[GridSection] = []
    provenance: dict[str, set[str]] = {"code_version": set(), "host": set(), "packages": set()}
    stored: dict[tuple[str, str], str] = {}  # (task, run_id) -> status, of every run a grid asked for
    for (grid, task), group in member_frame.groupby(["grid", "task"], sort=True):
        try:
            runs = load(root, task, grid=grid)
        except FileNotFoundError:
            runs = pd.DataFrame(columns=["run_id", "status"])
        stored.update(((task, r), st) for r, st in zip(runs["run_id"], runs["status"], strict=True))
        counts = dict(status.by_grid_task.get((grid, task), {}))
        kind = "study" if (group["kind"] == "study").any() else "grid"
        section = GridSection(grid, task, len(group), counts, is_reduced(grid), kind=kind)
        spec = grid_file(group["source"]) if "source" in group else {}
        if isinstance(spec.get("description"), str):
            section.description = " ".join(spec["description"].split())
        section.axes = declared_axes(spec, task) if spec else None
        if kind == "study":
            study_extras(section, spec, group, runs)
        for key, seen in provenance.items():
            if key in runs:
                seen.update(str(v) for v in runs[key].dropna().unique())
        _draw(str(root), section, runs, fig_dir, trials)
        sections.append(section)
    sections.sort(key=lambda s: (s.kind == "study", s.grid, s.task))  # grids first, then studies
    prov = {k: sorted(v) for k, v in provenance.items()}
    prov["packages"] = [json.dumps(json.loads(p)) for p in prov["packages"]][:3]
    claims = evaluate(str(root))
    by_key = {(s.grid, s.task): s for s in sections}
    for r in claims.results:
        # a claim's own table goes beside the figures of the grid that decided it
        home = by_key.get((r.grid or "", r.claim.task))
        if r.verdict.table is not None and home is not None:
            title = f"{r.claim.id} ({r.verdict.verdict}, on {r.sources}): {r.claim.statement}"
            home.tables.append((title, r.verdict.table))
    # the root as shown: a results URI's credentials never reach the page
    asked = set(zip(member_frame["task"], member_frame["run_id"], strict=True))
    totals = dict(Counter(stored.get(key, "missing") for key in asked))
    report = Report(
        redact(str(root)),
        sections,
        list(status.errors),
        prov,
        claims,
        totals,
        logged=status.logged,
        diverged_logged=status.diverged_logged,
    )
    (out_dir / "report.md").write_text(report.markdown(out_dir))
    (out_dir / "report.html").write_text(report.html(out_dir))
    return report
