"""The layers of docs/architecture.md, checked on the source: imports only point down.

An AST walk over every module (imports inside functions count too: a lazy import is still a
dependency), plus fresh interpreters that check what importing the bottom layers really loads.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# runner's subpackages, lowest first: a module may import its own subpackage and anything lower.
# errors and settings are leaves that every layer (tasks, analysis and cluster too) may import.
RUNNER_LAYERS = ["errors", "settings", "fs", "coord", "store", "grid", "execute", "run", "tune", "cli"]
LEAVES = ("runner.errors", "runner.settings")


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:`: imports that never run (annotations only)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    return skipped


def _imports(path: Path, runtime_only: bool = False) -> set[str]:
    """Absolute module names imported anywhere in the file (relative imports resolved); with
    `runtime_only`, not those under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = _name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    skipped = _type_only(tree) if runtime_only else set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
    return found


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "runner" or len(parts) < 2:
        return None
    return RUNNER_LAYERS.index(parts[1]) if parts[1] in RUNNER_LAYERS else None


def _violations(package: str, allowed: callable) -> list[str]:
    bad = []
    for path in _modules(package):
        for imported in sorted(_imports(path)):
            if not allowed(_name(path), imported):
                bad.append(f"{path.relative_to(REPO)} imports {imported}")
    return bad


def test_every_runner_subpackage_is_a_known_layer() -> None:
    for path in (REPO / "runner").iterdir():
        if path.name.startswith(("_", ".")) or path.name == "__pycache__":
            continue
        assert path.stem in RUNNER_LAYERS, f"runner/{path.name} is in no layer of docs/architecture.md"


def test_runner_imports_only_point_down() -> None:
    def allowed(importer: str, imported: str) -> bool:
        mine, theirs = _layer(importer), _layer(imported)
        if importer == "runner" or theirs is None or mine is None:
            return True  # the package facade re-exports lazily; non-runner imports are checked below
        return theirs <= mine

    assert _violations("runner", allowed) == []


def test_only_the_command_line_imports_analysis_and_nothing_imports_the_command_line() -> None:
    def allowed(importer: str, imported: str) -> bool:
        if imported.startswith("runner.cli"):
            return importer.startswith("runner.cli")
        if imported == "analysis" or imported.startswith("analysis."):
            return importer.startswith("runner.cli")
        return True

    assert _violations("runner", allowed) == []
    for package in ("analysis", "tasks", "cluster"):
        assert _violations(package, lambda _i, m: not m.startswith("runner.cli")) == []


def test_the_store_knows_data_not_code() -> None:
    def allowed(_importer: str, imported: str) -> bool:
        if imported.startswith(("runner.", "tasks")):
            return imported.startswith(("runner.store", "runner.fs", "runner.coord", *LEAVES, "tasks.status"))
        return not imported.startswith(("torch", "ray", "optuna", "cluster", "analysis"))

    bad = [v for v in _violations("runner", allowed) if v.startswith("runner/store/")]
    assert bad == []


def test_coordination_is_apart_from_data() -> None:
    """Drivers' coordination (runner/coord: locks, leases, heartbeats, claims) and the files under them
    (runner/fs) know no Parquet, no run and no task: the store uses them, never the other way round."""

    def allowed(_importer: str, imported: str) -> bool:
        if imported.startswith(("runner.", "tasks")):
            return imported.startswith(("runner.fs", "runner.coord", *LEAVES))
        return not imported.startswith(("pyarrow.parquet", "pyarrow.dataset", "torch", "ray", "optuna", "pandas"))

    bad = [v for v in _violations("runner", allowed) if v.startswith(("runner/coord/", "runner/fs/"))]
    assert bad == []


def _cycles(package: str) -> list[list[str]]:
    """Import cycles among the modules of each package under `package` (imports that run: lazy ones
    inside functions included, those under TYPE_CHECKING not)."""
    names = {_name(p): p for p in _modules(package)}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        parent = name.rsplit(".", 1)[0] if path.name != "__init__.py" else name
        graph[name] = {
            m for m in _imports(path, runtime_only=True) if m in names and m != name and m.rsplit(".", 1)[0] == parent
        }
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                found.append(path[path.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


@pytest.mark.parametrize("package", ["runner", "tasks", "analysis", "cluster"])
def test_no_import_cycles_inside_a_package(package: str) -> None:
    assert _cycles(package) == []


def test_tasks_import_nothing_of_runner_analysis_or_cluster() -> None:
    """Learners sit below the runner: not even its leaves (the registry reads CONVGRID_LEARNERS itself)."""
    forbidden = ("runner", "analysis", "cluster", "ray", "optuna", "pyarrow")

    def allowed(_importer: str, imported: str) -> bool:
        return imported.split(".")[0] not in forbidden

    assert _violations("tasks", allowed) == []


def test_analysis_imports_no_executor_tuner_task_or_torch() -> None:
    def allowed(importer: str, imported: str) -> bool:
        top = imported.split(".")[0]
        if imported.startswith("tasks.status"):
            return True  # the status vocabulary, a leaf
        if top == "optuna":
            return importer == "analysis.studies"  # Optuna's own plots of a study, imported when drawn
        if top in ("torch", "ray", "tasks", "cluster"):
            return False
        return top != "runner" or imported == "runner" or imported.startswith(("runner.store", *LEAVES))

    assert _violations("analysis", allowed) == []


# The adapter: its door (optuna_adapter) and the modules behind it, one job each.
ADAPTER = {
    "runner.tune.optuna_adapter",
    "runner.tune.optuna_plan",
    "runner.tune.optuna_journal",
    "runner.tune.optuna_storage",
    "runner.tune.optuna_study",
    "runner.tune.optuna_asks",
}


def test_optuna_is_imported_only_by_its_adapter() -> None:
    users = {_name(p) for p in _modules("runner") if any(m.split(".")[0] == "optuna" for m in _imports(p))}
    assert users == ADAPTER - {"runner.tune.optuna_adapter"}, users
    assert {_name(p) for p in _modules("runner") if _name(p).startswith("runner.tune.optuna_")} == ADAPTER


def test_the_optuna_adapter_hands_out_only_typed_values() -> None:
    """Swapping the tuning library touches one file: what the adapter's public functions and methods
    return is convgrid's own types (no `Any`, no Optuna object), and nothing else reaches into the
    objects it wraps (their Optuna parts are private fields)."""
    import typing

    from runner.tune import optuna_adapter as adapter

    public = [
        obj
        for name, obj in vars(adapter).items()
        if not name.startswith("_") and callable(obj) and getattr(obj, "__module__", "") in ADAPTER
    ]
    functions = [f for f in public if inspect.isfunction(f)]
    functions += [
        m
        for cls in public
        if inspect.isclass(cls)
        for n, m in vars(cls).items()
        if inspect.isfunction(m) and not n.startswith("_")
    ]
    functions += [
        m.__func__ for cls in public if inspect.isclass(cls) for m in vars(cls).values() if isinstance(m, classmethod)
    ]
    assert len(functions) >= 12

    def parts(hint: object) -> list[object]:
        return [hint, *(p for arg in typing.get_args(hint) for p in parts(arg))]

    # names the adapter imports for its annotations only (an ask process need not import the store)
    from multiprocessing.connection import Connection

    from runner.store import ResultStore

    type_checking_names = {"Connection": Connection, "ResultStore": ResultStore}

    for function in functions:
        names = {**vars(sys.modules[function.__module__]), **type_checking_names}
        returned = typing.get_type_hints(function, names)["return"]
        for part in parts(returned):
            module = getattr(part, "__module__", "")
            assert part is not typing.Any and not module.startswith("optuna"), (function.__qualname__, returned)
    # the Optuna objects inside StudyStorage and AskServer (fields named optuna_*) stay in the adapter
    reached = [
        (path.name, node.attr)
        for path in _modules("runner")
        if _name(path) not in ADAPTER
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr.startswith("optuna_")
    ]
    assert reached == []


def test_only_the_settings_module_reads_convgrid_variables() -> None:
    """Every CONVGRID_ knob is a field of runner.settings.Settings: no other module reads one."""

    def reads(path: Path) -> list[str]:
        found = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("CONVGRID_"):
                found.append(f"{path.relative_to(REPO)}: {node.value}")
        return found

    sources = [p for package in ("runner", "tasks", "analysis", "cluster") for p in _modules(package)]
    found = [r for p in sources if p.name != "settings.py" for r in reads(p)]
    # the one exception: the learners' registry reads its own variable (learners import nothing of the runner),
    # which Settings declares under the same name
    assert found == ["tasks/registry.py: CONVGRID_LEARNERS"]
    from runner.settings import env_name
    from tasks.registry import LEARNERS_VARIABLE

    assert env_name("learners") == LEARNERS_VARIABLE


@pytest.mark.parametrize(
    "module", ["analysis", "runner.store", "runner.grid.spec", "runner.run.grid_run", "runner.settings", "tasks.status"]
)
def test_importing_a_lower_layer_loads_no_torch_ray_or_executor(module: str) -> None:
    heavy = ["torch", "ray", "optuna", "runner.execute.ray_pool", "runner.execute.worker", "runner.tune.driver"]
    code = f"import sys, {module}; print(','.join(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import {module} loaded {out.stdout.strip()}"


def test_the_driver_plans_and_reads_without_torch_or_ray(tmp_path: Path) -> None:
    """The commands that only plan or read answer without the learners' numerical code: a task's
    params module (its SPEC) is all that validation and run ids need. One interpreter, several commands."""
    heavy = ["torch", "ray", "optuna", "runner.execute.worker"]
    res = str(tmp_path)
    commands = [
        ["run", f"grids/{grid}.yaml", "--dry-run", "--results", res]
        for grid in ("least_squares/step_sweep", "deep_linear/fig2_depth", "hierarchical/c1_joint_vs_layerwise")
    ] + [["status", res]]
    code = (
        f"import sys; from runner.cli import main; codes = [main(a) for a in {commands!r}]; "
        f"print(codes, 'loaded:' + ','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[0, 0, 0, 0] loaded:", out.stdout


def test_check_loads_no_plotting_backend_nor_optuna(tmp_path: Path) -> None:
    """`convgrid check` imports every learner's claims, and some of them helpers of their figure module:
    figure modules choose no backend and import no pyplot at import time (issue 25), and Optuna is
    imported only when a study is drawn."""
    from runner import run_grid
    from tests.options import opts

    grid = {"name": "lsq", "blocks": [{"task": "least_squares", "params": {"n_iters": 20}, "product": {"lr": [0.1]}}]}
    run_grid(grid, tmp_path, opts())
    heavy = ["matplotlib.pyplot", "optuna", "torch"]
    code = (
        f"import sys; from runner.cli import main; code = main(['check', {str(tmp_path)!r}]); "
        f"print(code, 'loaded:' + ','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "0 loaded:", out.stdout[-2000:]
