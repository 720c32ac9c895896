"""Markdown for the report: free text escaped so that it renders as written, code spans, tables.

Free text (claims, errors) is escaped for Markdown, so that TeX such as `$\\|W\\|_F$` or `||Y||`
reaches the page as written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd

from runner.errors import printable

# Markdown syntax that may appear in free text: backslash, code spans, emphasis, links, table pipes.
_MD_SPECIAL = re.compile(r"([\\`*\[\]|])")
# An underscore opens emphasis only at a word boundary (Python-Markdown ignores intra-word ones,
# so iters_rel_1e6 stays readable in report.md).
_MD_UNDERSCORE = re.compile(r"(?<!\w)_|_(?!\w)")
# Raw HTML passes through Markdown: a tag-like `<` and an entity-like `&` are written as entities.
_MD_HTML = re.compile(r"&(?=#?\w+;)|<(?=[A-Za-z/!?])")


def escape_md(text: object) -> str:
    """`text` as Markdown inline text that renders to exactly `text` (one line: table cells cannot break)."""
    out = _MD_SPECIAL.sub(r"\\\1", " ".join(printable(str(text), keep="\n\r\t").split()))
    out = _MD_UNDERSCORE.sub(r"\\_", out)
    return _MD_HTML.sub(lambda m: "&amp;" if m.group() == "&" else "&lt;", out)


def code_md(text: object) -> str:
    """`text` as a Markdown code span (fenced with more backticks than it contains)."""
    text = " ".join(printable(str(text), keep="\n\r\t").split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def row(cells: Sequence[object]) -> str:
    """One table row of escaped free text."""
    return "| " + " | ".join(escape_md(c) for c in cells) + " |"


def header(names: Sequence[object]) -> list[str]:
    return [row(names), "|---" * len(names) + "|"]


def cell(value: object) -> object:
    if isinstance(value, float):
        return "-" if value != value else f"{value:.4g}"  # NaN: a number the row does not have
    return value


def table(frame: pd.DataFrame) -> list[str]:
    """`frame` as Markdown table lines: its column names as the header, floats to 4 significant digits."""
    body = [row([cell(v) for v in values]) for values in frame.itertuples(index=False)]
    return [*header(list(frame.columns)), *body]
