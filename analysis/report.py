"""`convgrid report RESULTS --out DIR`: every figure, the claims table, the grids run and their sizes,
failures and provenance, as Markdown and as one self-contained HTML page (figures inlined).

The Markdown is the single source: the HTML page is that Markdown rendered by Python-Markdown (tables,
fenced code) inside a Jinja template (analysis/templates/report.html.j2), with each figure's path
replaced by a data: URI so that the page fetches nothing. Free text (claims, errors) is escaped for
Markdown, so that TeX such as `$\\|W\\|_F$` or `||Y||` reaches the page as written.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
import markdown as markdown_lib
import markupsafe
import pandas as pd

from analysis.claims import ClaimsTable, evaluate
from analysis.figures import figure_for, is_reduced
from analysis.load import curves, load, members
from runner.errors import redact
from runner.store import ResultStore
from runner.store.status import store_status
from tasks.status import ALL_STATUSES

MARKDOWN_EXTENSIONS = ("tables", "fenced_code")
STATUS_COLUMNS = (*ALL_STATUSES, "missing")
RERUN_GRID = "rerun"  # what `convgrid run --only` without a grid file links its runs to

# Markdown syntax that may appear in free text: backslash, code spans, emphasis, links, table pipes.
_MD_SPECIAL = re.compile(r"([\\`*\[\]|])")
# An underscore opens emphasis only at a word boundary (Python-Markdown ignores intra-word ones,
# so iters_rel_1e6 stays readable in report.md).
_MD_UNDERSCORE = re.compile(r"(?<!\w)_|_(?!\w)")
# Raw HTML passes through Markdown: a tag-like `<` and an entity-like `&` are written as entities.
_MD_HTML = re.compile(r"&(?=#?\w+;)|<(?=[A-Za-z/!?])")


def escape_md(text: object) -> str:
    """`text` as Markdown inline text that renders to exactly `text` (one line: table cells cannot break)."""
    out = _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))
    out = _MD_UNDERSCORE.sub(r"\\_", out)
    return _MD_HTML.sub(lambda m: "&amp;" if m.group() == "&" else "&lt;", out)


def code_md(text: object) -> str:
    """`text` as a Markdown code span (fenced with more backticks than it contains)."""
    text = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(escape_md(c) for c in cells) + " |"


def _cell(value: object) -> object:
    if isinstance(value, float):
        return "-" if value != value else f"{value:.4g}"  # NaN: a number the row does not have
    return value


def _table(frame: pd.DataFrame) -> list[str]:
    """`frame` as Markdown table lines: its column names as the header, floats to 4 significant digits."""
    body = [_row([_cell(v) for v in row]) for row in frame.itertuples(index=False)]
    return [_row(frame.columns), "|---" * len(frame.columns) + "|", *body]


def _data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.PackageLoader("analysis", "templates"), autoescape=True)
    return env.get_template("report.html.j2")


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


@dataclass
class Report:
    root: str
    sections: list[GridSection]
    failures: list[tuple[str, str, str]]
    provenance: dict[str, list[str]]
    claims: ClaimsTable = field(default_factory=ClaimsTable)

    def markdown(self, out: Path, image_src: Callable[[Path], str] | None = None) -> str:
        """The report as Markdown; figures link to `image_src(path)` (default: the path relative to `out`)."""
        # quoted: a space or parenthesis in a folder name would end the Markdown link early
        src = image_src or (lambda p: urllib.parse.quote(os.path.relpath(p, out)))
        lines = [f"# convgrid report: {code_md(self.root)}", ""]
        lines += [_row(["grid", "task", "cells", *STATUS_COLUMNS, "kind"]), "|---" * (4 + len(STATUS_COLUMNS)) + "|"]
        for s in self.sections:
            kind = "reduced (CI/demo size, not a reproduction)" if s.reduced else "full grid"
            if s.grid == RERUN_GRID:
                kind = "reruns of stored runs (`run --only`)"
            lines.append(_row([s.grid, s.task, s.cells, *(s.counts.get(k, 0) for k in STATUS_COLUMNS), kind]))
        for s in self.sections:
            lines += ["", f"## {escape_md(s.grid)} ({escape_md(s.task)})", ""]
            if s.figure:
                lines.append(f"Figure {code_md(s.figure)}." + (f" {escape_md(s.note)}" if s.note else ""))
            elif s.note:
                lines.append(escape_md(s.note))
            for img in s.images:
                lines += ["", f"![{escape_md(img.stem)}]({src(img)})"]
            for title, table in s.tables:
                lines += ["", escape_md(title), "", *_table(table)]
        decided = [r for r in self.claims.results if r.grid is not None]
        if decided:
            header = ["claim", "grid", "size", "verdict", "expected", "measured", "paper"]
            lines += ["", "## Claims", "", _row(header), "|---" * len(header) + "|"]
            for r in decided:
                v = r.verdict
                lines.append(_row([r.claim.id, r.sources, r.size, v.verdict, r.claim.expected, v.measured, v.paper]))
            lines += [
                "",
                "A verdict on a reduced grid only exercises the path; the paper's claim is decided on the full grid.",
            ]
        if self.failures:
            lines += ["", "## Failures", ""]
            lines += [f"- {code_md(task)} {code_md(rid[:12])}: {escape_md(err)}" for task, rid, err in self.failures]
        lines += ["", "## Provenance", ""]
        lines += [f"- {escape_md(k)}: {', '.join(code_md(v) for v in vs)}" for k, vs in self.provenance.items()]
        return "\n".join(lines) + "\n"

    def html(self, out: Path) -> str:
        """One self-contained page: the Markdown rendered, figures inlined as data: URIs."""
        text = self.markdown(out, image_src=_data_uri)
        body = markdown_lib.markdown(text, extensions=list(MARKDOWN_EXTENSIONS), output_format="html")
        return _template().render(title=f"convgrid report: {self.root}", body=markupsafe.Markup(body)) + "\n"


def build_report(root: str | os.PathLike[str], out: str | os.PathLike[str]) -> Report:
    out_dir = Path(out)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    member_frame = members(root)
    # the same counts and failures `convgrid status` prints: one definition of what a grid's state is
    status = store_status(ResultStore(root), verify=False)
    sections: list[GridSection] = []
    failures = list(status.errors)
    provenance: dict[str, set[str]] = {"code_version": set(), "host": set(), "packages": set()}
    for (grid, task), group in member_frame.groupby(["grid", "task"], sort=True):
        try:
            runs = load(root, task, grid=grid)
        except FileNotFoundError:
            runs = pd.DataFrame(columns=["run_id", "status"])
        counts = dict(status.by_grid_task.get((grid, task), {}))
        section = GridSection(grid, task, len(group), counts, is_reduced(grid))
        for key, seen in provenance.items():
            if key in runs:
                seen.update(str(v) for v in runs[key].dropna().unique())
        found = figure_for(task, grid)
        if found is None:
            section.note = "No figure module draws this grid."
        elif runs.empty:
            section.figure, section.note = found[0], "No finished runs to draw."
        else:
            section.figure = found[0]
            grid_dir = fig_dir / grid
            grid_dir.mkdir(exist_ok=True)
            section.images = found[1](runs, curves(root, task, runs=runs), grid_dir)
        sections.append(section)
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
    report = Report(redact(str(root)), sections, failures, prov, claims)
    (out_dir / "report.md").write_text(report.markdown(out_dir))
    (out_dir / "report.html").write_text(report.html(out_dir))
    return report
