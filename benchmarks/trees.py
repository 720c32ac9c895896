"""Contenders run from other source trees, interleaved with this tree's in one benchmark run.

`--against TREE` (labelled "against") or `--against LABEL=TREE`, repeatable: each of a benchmark's
convgrid contenders is also run from each tree, named "CONTENDER@LABEL", in the same rotated rounds as
the rest. A tree is a plain copy of the sources (a `git archive` of the commit before a change, or one
with a mechanism switched off), imported ahead of the installed convgrid by the contender and by Ray's
workers alike, so a before/after or a with/without is measured on the same shared machine at once.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def parse_trees(values: list[str] | None) -> dict[str, Path]:
    """{label: tree} from the `--against` values; a tree must hold the runner's sources."""
    trees: dict[str, Path] = {}
    for value in values or []:
        label, sep, path = value.rpartition("=") if "=" in value else ("", "", value)
        label = label if sep else "against"
        tree = Path(path).resolve()
        if not (tree / "runner" / "__init__.py").is_file():
            raise SystemExit(f"--against {value}: {tree} holds no runner/ sources")
        if label in trees or "@" in label:
            raise SystemExit(f"--against {value}: the label {label!r} is taken or has an '@'")
        trees[label] = tree
    return trees


def with_trees(names: list[str], trees: dict[str, Path]) -> list[str]:
    """`names` and, for each tree, each of them run from it."""
    return names + [f"{name}@{label}" for label in trees for name in names]


def resolve(contender: str, trees: dict[str, Path]) -> tuple[str, Path]:
    """(contender without its label, the tree it runs from)."""
    name, _, label = contender.partition("@")
    return name, trees[label] if label else REPO


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that runs `tree`'s sources: its runner first, for the contender and Ray's workers."""
    path = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "BENCH_TREE": str(tree)}
