"""No private API of Optuna, Ray, threading or atexit anywhere in the tree: an attribute named `_x` reached
from one of those modules (`ray._private.worker`, `threading._shutdown`), imported from one (`from
ray._raylet import ...`), fetched by name (`getattr(atexit, "_run_exitfuncs")`), or, in a module that
uses Optuna or Ray, a private attribute of one of their objects (`trial._trial_id`). Each upgrade of a pin
would otherwise be archaeology. Where one is the only way, it is listed in KEPT with what it buys, and
each listed use must still be there (a use that went takes its entry with it)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("runner", "tasks", "analysis", "cluster", "tests", "benchmarks")
MODULES = ("optuna", "ray", "threading", "atexit")

# (file, name reached): why there is no public way, and what it buys
KEPT = {
    ("runner/cli/process_exit.py", "threading._shutdown"): (
        "interpreter_exit_steps: the interpreter's own exit steps run before os._exit, which skips them "
        "(fallback when absent; tests/test_process_exit.py fails loudly on a Python without them)"
    ),
    ("runner/cli/process_exit.py", "atexit._run_exitfuncs"): "the same function, its second step",
    ("tests/test_ray_conventions.py", "ray._private.state"): (
        "actor_reprs: the GCS actor table; Ray's public state API (ray.util.state) needs the dashboard, "
        "which the embedded Ray does not start"
    ),
    ("tests/test_ray_conventions.py", "state._connect_and_get_accessor"): "the same function",
    ("tests/test_cluster_files.py", "ray.autoscaler._private.util"): (
        "the checks `ray up` runs on a cluster file (prepare_config, validate_config): the launcher exposes no other"
    ),
}


def _by_name(node: ast.AST) -> bool:
    """`getattr(module, "_name", ...)` or `hasattr(module, "_name")`."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    )


def private_uses(source: str) -> list[str]:
    """The dotted names of MODULES' private attributes that `source` reaches (as written, from the module's
    own name: `import ray as r` is not followed)."""
    found = []

    def dotted(node: ast.expr) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            base = dotted(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def private(name: str) -> bool:
        parts = name.split(".")
        return parts[0] in MODULES and any(p.startswith("_") and not p.startswith("__") for p in parts[1:])

    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Attribute):
            name = dotted(node)
            names = [name] if name is not None else []
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif _by_name(node):
            assert isinstance(node, ast.Call) and isinstance(node.args[1], ast.Constant)
            base = dotted(node.args[0])
            names = [] if base is None else [f"{base}.{node.args[1].value}"]
        found += [n for n in names if private(n)]
    # `a._b._c` is walked as `a._b._c` and `a._b`: the shortest private prefix of each says it
    return sorted({n for n in found if not any(n.startswith(f"{m}.") for m in found if m != n)})


def _defined(tree: ast.Module) -> set[str]:
    """Every name a module defines or binds: functions, classes, attributes it assigns, variables,
    arguments, keywords, imports."""
    names = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
            names.add(n.attr)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            names.add(n.id)
        elif isinstance(n, ast.arg) or isinstance(n, ast.keyword) and n.arg:
            names.add(n.arg)
        elif isinstance(n, ast.alias):
            names.add(n.asname or n.name.split(".")[-1])
    return names


def _imported(tree: ast.Module) -> set[str]:
    return {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
        n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
    }


def foreign_privates(tree: ast.Module, ours: dict[str, set[str]]) -> list[str]:
    """In a module that imports Optuna or Ray, an attribute `obj._x` where `_x` is defined neither by the
    module nor by a convgrid module or package it imports (`ours`: module -> the names it defines): a private of
    a dependency's object (`trial._trial_id`, a subclass's `self._lock`). `os._exit` is public."""
    imported = _imported(tree)
    if not {m.split(".")[0] for m in imported} & {"optuna", "ray"}:
        return []
    # a package imported brings what its modules define (`from runner import RayExecutor` re-exports)
    theirs = [
        names for module, names in ours.items() if any(module == m or module.startswith(f"{m}.") for m in imported)
    ]
    known = _defined(tree).union(*theirs, {"_exit"})
    return sorted(
        ast.unparse(n)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and n.attr.startswith("_")
        and not n.attr.startswith("__")
        and n.attr not in known
    )


def test_the_scan_sees_each_way_in() -> None:
    assert private_uses("import threading\nthreading._shutdown()") == ["threading._shutdown"]
    assert private_uses("import ray\nray._private.worker._global_node.x") == ["ray._private"]
    assert private_uses("from ray._raylet import X") == ["ray._raylet"]
    assert private_uses("import optuna._imports") == ["optuna._imports"]
    assert private_uses("from optuna.storages import _heartbeat") == ["optuna.storages._heartbeat"]
    assert private_uses("import atexit\ngetattr(atexit, '_run_exitfuncs')") == ["atexit._run_exitfuncs"]
    public = "import ray, threading, optuna\nray.get_runtime_context(); threading.Thread.__init__; optuna.Study"
    assert private_uses(public + "\nself._lock; logging.getLogger('ray._private.worker')") == []
    subclass = "import optuna\nclass J(optuna.storages.journal.JournalFileBackend):\n    def f(self): self._lock\n"
    assert foreign_privates(ast.parse(subclass), {}) == ["self._lock"]
    assert foreign_privates(ast.parse(subclass + "    def g(self): self._lock = 1\n"), {}) == []
    via = "import optuna\nfrom runner.x import T\ntrial._trial_id; t._own"
    assert foreign_privates(ast.parse(via), {"runner.x": {"_own"}}) == ["trial._trial_id"]


def test_no_private_api_of_optuna_ray_threading_or_atexit() -> None:
    paths = [path for root in ROOTS for path in sorted((REPO / root).rglob("*.py"))]
    trees = {str(path.relative_to(REPO)): ast.parse(path.read_text()) for path in paths}
    ours = {f.removesuffix(".py").removesuffix("/__init__").replace("/", "."): _defined(t) for f, t in trees.items()}
    seen = {(file, name) for file, tree in trees.items() for name in private_uses(ast.unparse(tree))}
    seen |= {(file, name) for file, tree in trees.items() for name in foreign_privates(tree, ours)}
    assert seen - KEPT.keys() == set(), "private APIs (use a public one, or list it in KEPT with why)"
    assert KEPT.keys() - seen == set(), "listed in KEPT but no longer used: drop the entry"
