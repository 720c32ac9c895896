"""Every module and code file that a docstring, a comment or a doc names exists under that name.

Modules move; prose that names the old place sends the next reader looking for what is not there. A
dotted name counts when its first two parts are a real package or module (`runner.store.parts`,
`tasks.base.RunContext`): the rest must then import or be an attribute. A path counts when it names a
.py file in one of the code folders. Code itself is left to the interpreter and mypy.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import io
import re
import tokenize
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CODE = ("runner", "tasks", "analysis", "cluster")
DOTTED = re.compile(r"(?<![\w./-])((?:runner|tasks|analysis|cluster)(?:\.[A-Za-z_]\w*){2,})")
PY_PATH = re.compile(r"(?<![\w./-])((?:runner|tasks|analysis|cluster|tests|benchmarks)/[\w/]+\.py)\b")


def prose_of_python(path: Path) -> str:
    """The docstrings and comments of a module."""
    source = path.read_text()
    parts = [
        ast.get_docstring(node) or ""
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
    ]
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    parts += [tok.string for tok in tokens if tok.type == tokenize.COMMENT]
    return "\n".join(parts)


def prose_files() -> list[tuple[Path, str]]:
    files = [p for d in (*CODE, "tests", "benchmarks") for p in sorted((REPO / d).rglob("*.py"))]
    out = [(p, prose_of_python(p)) for p in files]
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return out + [(p, p.read_text()) for p in docs]


@cache
def is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 1, -1):
        module = ".".join(parts[:i])
        if is_module(module):
            obj: object = importlib.import_module(module)
            for attr in parts[i:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
    return False


def test_named_modules_and_files_exist() -> None:
    missing = []
    for path, text in prose_files():
        where = path.relative_to(REPO)
        for match in DOTTED.finditer(text):
            name = match.group(1)
            if is_module(".".join(name.split(".")[:2])) and not resolves(name):
                missing.append(f"{where}: {name}")
        missing += [f"{where}: {m.group(1)}" for m in PY_PATH.finditer(text) if not (REPO / m.group(1)).exists()]
    assert not missing, "named but not there:\n" + "\n".join(sorted(set(missing)))


def test_the_check_finds_a_moved_module() -> None:
    assert resolves("runner.store.parts.PartFiles") or resolves("runner.store.parts")
    assert not resolves("runner.store.exclusive")
    assert not resolves("tasks.base.NoSuchThing")
    assert PY_PATH.search("see runner/store/gone.py") and not (REPO / "runner/store/gone.py").exists()
