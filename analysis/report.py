"""`convgrid report RESULTS --out DIR`: every figure, the claims table, the grids run and their sizes,
failures and provenance, as Markdown and as one self-contained HTML page (figures inlined)."""

from __future__ import annotations

import base64
import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.claims import ClaimsTable, evaluate
from analysis.figures import figure_for, is_reduced
from analysis.load import curves, load, members


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


@dataclass
class Report:
    root: str
    sections: list[GridSection]
    failures: list[tuple[str, str, str]]
    provenance: dict[str, list[str]]
    claims: ClaimsTable = field(default_factory=ClaimsTable)

    def markdown(self, out: Path) -> str:
        lines = [f"# convgrid report: `{self.root}`", ""]
        lines += [
            "| grid | task | cells | ok | diverged | failed | timeout | pruned | missing | kind |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for s in self.sections:
            c = s.counts
            kind = "reduced (CI/demo size, not a reproduction)" if s.reduced else "full grid"
            cols = [c.get(k, 0) for k in ("ok", "diverged", "failed", "timeout", "pruned", "missing")]
            lines.append(f"| {s.grid} | {s.task} | {s.cells} | " + " | ".join(map(str, cols)) + f" | {kind} |")
        for s in self.sections:
            lines += ["", f"## {s.grid} ({s.task})", ""]
            if s.figure:
                lines.append(f"Figure `{s.figure}`." + (f" {s.note}" if s.note else ""))
            elif s.note:
                lines.append(s.note)
            for img in s.images:
                lines += ["", f"![{img.stem}]({os.path.relpath(img, out)})"]
        decided = [r for r in self.claims.results if r.grid is not None]
        if decided:
            lines += [
                "",
                "## Claims",
                "",
                "| claim | grid | size | verdict | expected | measured | paper |",
                "|---|---|---|---|---|---|---|",
            ]
            for r in decided:
                cells = [
                    r.claim.id,
                    r.grid or "-",
                    "reduced" if r.reduced else "full",
                    r.verdict.verdict,
                    r.claim.expected,
                    r.verdict.measured,
                    r.verdict.paper,
                ]
                lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
            lines.append("")
            lines.append(
                "A verdict on a reduced grid only exercises the path; the paper's claim is decided on the full grid."
            )
        if self.failures:
            lines += ["", "## Failures", ""]
            lines += [f"- `{task}` `{rid[:12]}`: {err}" for task, rid, err in self.failures]
        lines += ["", "## Provenance", ""]
        lines += [f"- {k}: {', '.join(v)}" for k, v in self.provenance.items()]
        return "\n".join(lines) + "\n"

    def html(self, out: Path) -> str:
        body: list[str] = []
        in_table = False
        for line in self.markdown(out).splitlines():
            if in_table and not line.startswith("|"):
                body.append("</table>")
                in_table = False
            if line.startswith("!["):
                path = out / line[line.index("(") + 1 : -1]
                data = base64.b64encode(path.read_bytes()).decode()
                body.append(
                    f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}" style="max-width:100%">'
                )
            elif line.startswith("# "):
                body.append(f"<h1>{html.escape(line[2:])}</h1>")
            elif line.startswith("## "):
                body.append(f"<h2>{html.escape(line[3:])}</h2>")
            elif line.startswith("|---"):
                continue
            elif line.startswith("| "):
                if not in_table:
                    body.append("<table border=1 cellpadding=4 style='border-collapse:collapse'>")
                    in_table = True
                cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
                body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            elif line.startswith("- "):
                body.append(f"<li>{html.escape(line[2:])}</li>")
            elif line:
                body.append(f"<p>{html.escape(line)}</p>")
        if in_table:
            body.append("</table>")
        text = "\n".join(body)
        return f"<!doctype html><html><head><meta charset='utf-8'><title>convgrid report</title></head><body>{text}</body></html>\n"


def build_report(root: str | os.PathLike[str], out: str | os.PathLike[str]) -> Report:
    out_dir = Path(out)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    member_frame = members(root)
    sections: list[GridSection] = []
    failures: list[tuple[str, str, str]] = []
    provenance: dict[str, set[str]] = {"code_version": set(), "host": set(), "packages": set()}
    for (grid, task), group in member_frame.groupby(["grid", "task"], sort=True):
        try:
            runs = load(root, task, grid=grid)
        except FileNotFoundError:
            runs = pd.DataFrame(columns=["run_id", "status"])
        counts = runs["status"].value_counts().to_dict()
        counts["missing"] = len(set(group["run_id"]) - set(runs["run_id"]))
        section = GridSection(grid, task, len(group), counts, is_reduced(grid))
        for _, row in runs[runs["status"].isin(["failed", "timeout"])].iterrows():
            failures.append((task, row["run_id"], str(row["error"]).strip().splitlines()[0]))
        for key in provenance:
            if key in runs:
                provenance[key].update(str(v) for v in runs[key].dropna().unique())
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
    report = Report(str(root), sections, failures, prov, evaluate(str(root)))
    (out_dir / "report.md").write_text(report.markdown(out_dir))
    (out_dir / "report.html").write_text(report.html(out_dir))
    return report
