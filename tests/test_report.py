"""`convgrid report`: the HTML page is real Markdown rendered in a template, parsed here as HTML: tables
have headers, code is <code>, TeX and ||Y|| survive, figures are inlined and nothing is fetched."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from analysis.claims import HOLDS, Claim, Verdict
from analysis.figures import save_figure
from analysis.report import Report, build_report, escape_md
from runner import run_grid
from tests.options import opts

TEX = r"$\|W\|_F$ = 0.25 after one sweep"
NORM = "identity final loss / (||Y||^2/2) = 1.07; <b>not bold</b> & iters_rel_1e6 *not em* [not a link](x)"
TRICKY = [TEX, NORM, "a `tick` and ``two``", r"back\slash \\ double", "_lead and trail_", "&amp; stays &amp;", "x|y"]
VOID = {"meta", "img", "br", "hr", "link", "input", "col", "source", "wbr", "area", "base", "embed", "param", "track"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)

    def find(self, tag: str) -> list[Node]:
        found = [self] if self.tag == tag else []
        for child in self.children:
            found += child.find(tag)
        return found


class TreeParser(HTMLParser):
    """A minimal DOM: enough to ask which element holds what (the stdlib has no tree builder)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.current = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.current.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.current))

    def handle_endtag(self, tag: str) -> None:
        node: Node | None = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"</{tag}> closes nothing"
        self.current = node.parent

    def handle_data(self, data: str) -> None:
        # Text after a child element is kept as a text node so that order does not matter for all_text.
        self.current.children.append(Node("#text", {}, self.current, text=data))


def parse(html: str) -> Node:
    parser = TreeParser()
    parser.feed(html)
    parser.close()
    assert parser.current is parser.root, "unclosed elements"
    return parser.root


def _toy_figure(runs: pd.DataFrame, curves: pd.DataFrame, out_dir: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.semilogy(curves["step"], curves["err"])
    return save_figure(fig, out_dir, "toy")


def _tex_claim() -> Claim:
    def check(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
        return Verdict(HOLDS, TEX, paper=NORM)

    return Claim("lsq.tex", "-", "least_squares", ("lsq_small",), "TeX and norms survive", check)


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("store")
    grid = {
        "name": "lsq_small",
        "blocks": [
            {"task": "least_squares", "params": {"d_in": 4, "m": 12, "n_iters": 30}, "product": {"lr": [0.01, 0.05]}}
        ],
    }
    run_grid(grid, root, opts())
    out = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("analysis.claims.registry", lambda: [_tex_claim()])
        mp.setattr("analysis.report.figure_for", lambda task, grid: ("toy", _toy_figure))
        build_report(str(root), out)
    return out


@pytest.fixture(scope="module")
def page(report_dir: Path) -> Node:
    return parse((report_dir / "report.html").read_text())


def test_tables_have_header_cells(page: Node) -> None:
    tables = page.find("table")
    assert len(tables) == 2  # the grids and the claims
    for table in tables:
        (thead,) = table.find("thead")
        assert [th.all_text() for th in thead.find("th")][:2] in (["grid", "task"], ["claim", "grid"])
        assert table.find("tbody") and not thead.find("td")


def test_inline_code_is_code_and_no_backtick_is_left(page: Node) -> None:
    (title,) = page.find("h1")
    assert Path(title.find("code")[0].all_text()).name.startswith("store")  # the store root
    assert "toy" in [c.all_text() for c in page.find("code")]  # "Figure `toy`."
    assert "`" not in page.all_text()


def test_tex_and_norms_survive_unchanged(page: Node) -> None:
    (claims,) = [t for t in page.find("table") if t.find("th")[0].all_text() == "claim"]
    cells = [td.all_text() for td in claims.find("td")]
    assert TEX in cells and NORM in cells
    assert "//Y//" not in page.all_text() and not page.find("b") and not page.find("em") and not page.find("a")


def test_lists_are_lists(page: Node) -> None:
    items = page.find("li")
    assert items and all(li.parent is not None and li.parent.tag in ("ul", "ol") for li in items)


def test_page_is_self_contained(page: Node, report_dir: Path) -> None:
    images = page.find("img")
    assert len(images) == 1 and (report_dir / "figures" / "lsq_small" / "toy.png").exists()
    assert all(img.attrs["src"].startswith("data:image/png;base64,") for img in images)
    assert not page.find("script") and not page.find("link") and not page.find("iframe")
    stack = [page]
    while stack:
        node = stack.pop()
        stack += node.children
        for name, value in node.attrs.items():
            assert not value.lower().startswith(("http://", "https://", "//")), (node.tag, name, value[:80])
    styles = " ".join(s.all_text() for s in page.find("style"))
    assert "url(" not in styles and "@import" not in styles


def test_markdown_keeps_relative_figure_paths(report_dir: Path) -> None:
    md = (report_dir / "report.md").read_text()
    assert "![toy](figures/lsq_small/toy.png)" in md and "data:" not in md


def test_free_text_round_trips_through_markdown(tmp_path: Path) -> None:
    """Every tricky string, in a table cell (claims) and in a list item (failures), renders as written."""
    report = Report("store", [], [("least_squares", "abcdef123456", s) for s in TRICKY], {"host": ["vm"]})
    html = report.html(tmp_path)
    page = parse(html)
    items = [li for li in page.find("li") if li.find("code")[0].all_text() == "least_squares"]
    # "least_squares, 1 run: <reason>. Run ids: abcdef123456", one reason per string
    failures = [li.all_text().split(": ", 1)[1].rsplit(". Run ids: ", 1)[0] for li in items]
    assert sorted(failures) == sorted(TRICKY)
    assert all("\n" not in escape_md(s) for s in TRICKY + ["two\nlines"])
