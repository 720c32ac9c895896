"""One name, one type, across every learner (issue 45): a whole-store read (`pd.read_parquet("R/runs")`,
pyarrow.dataset, DuckDB's case-insensitive `union_by_name`, polars) breaks on two learners' columns of one
name with different types, or of names that differ only in case. Every registered learner is checked
here, a learner registered from outside when its schemas are first built; the renames that resolved
the clashes (hierarchical `k` -> `target_widths`, linear_resnet `k` -> `d_out`) keep every run id."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

from runner.grid.identity import canonical_json, hash_id, run_id, validate_params
from runner.grid.schema import name_clashes, task_schemas
from tasks.registry import get_spec, task_names


def test_no_two_learners_share_a_name_with_another_type_or_case() -> None:
    assert "faulty" in task_names()  # the external test learner is among them
    assert name_clashes({t: task_schemas(t)[0] for t in task_names()}) == []


def test_a_clash_is_found_and_named() -> None:
    a = pa.schema([pa.field("K", pa.int64()), pa.field("lr", pa.float64())])
    b = pa.schema([pa.field("k", pa.list_(pa.int64())), pa.field("lr", pa.float64())])
    c = pa.schema([pa.field("lr", pa.string())])
    (case,) = name_clashes({"ldminv": a, "hierarchical": b})
    assert "ldminv: K int64" in case and "hierarchical: k list<item: int64>" in case
    assert len(name_clashes({"x": a, "y": c})) == 1  # lr float64 against string
    assert name_clashes({"x": a, "y": a}) == []  # one name, one type: shared columns are fine


def _id(task: str, params: dict[str, object]) -> str:
    """The run id by its definition (runner.grid.identity's docstring), computed here by hand."""
    spec = get_spec(task)
    return hash_id(canonical_json({"task": task, "version": spec.version, "params": params}))


def test_renamed_params_keep_their_run_ids_and_old_names() -> None:
    hier = get_spec("hierarchical")
    old = validate_params(hier, {"L": 3, "k": [4, 3], "seed": 2})
    new = validate_params(hier, {"L": 3, "target_widths": [4, 3], "seed": 2})
    assert old == new and new.target_widths == [4, 3]  # type: ignore[attr-defined]
    # the id hashes the list under its old name `k`, as every stored run's id did (with the union's tag
    # `learner` and the wk learner's resolved `k_start`, as ever)
    expected = _id("hierarchical", {"k": [4, 3], "seed": 2, "learner": "wk", "k_start": "distill"})
    assert run_id(hier, new) == expected
    lin = get_spec("linear_resnet")
    p = validate_params(lin, {"d": 12, "k": 12, "m": 40})
    assert p.d_out == p.k == 12  # type: ignore[attr-defined]
    assert run_id(lin, p) == run_id(lin, validate_params(lin, {"d": 12, "d_out": 12, "m": 40}))
    assert '"k":12' in canonical_json(_canonical(lin, p)) and "d_out" not in canonical_json(_canonical(lin, p))
    with pytest.raises(ValueError, match="not both"):
        validate_params(lin, {"k": 12, "d_out": 12, "d": 12})


def _canonical(task: object, params: object) -> dict[str, object]:
    from runner.grid.identity import canonical_params

    return canonical_params(task, params)  # type: ignore[arg-type]


CLASHING = """
from typing import Any, ClassVar
from pydantic import Field
from tasks.base import Result, TaskParams


class P(TaskParams):
    K: str = Field("a", description="an int elsewhere (ldminv's depth)")


class T:
    name: ClassVar[str] = "clash"
    version: ClassVar[str] = "1"
    Params: ClassVar[Any] = P
    summary_fields: ClassVar[dict[str, str]] = {}
    curve_fields: ClassVar[dict[str, str]] = {}

    def run(self, p: P, ctx: Any) -> Result:
        return Result(status="ok")


TASK = T
"""


def test_an_external_learner_that_clashes_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "clash_learner"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(CLASHING)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CONVGRID_LEARNERS", "faulty=tests.toy_learner,clash=clash_learner")
    monkeypatch.setenv("CONVGRID_CACHE", str(tmp_path / "cache"))
    try:
        with pytest.raises(TypeError, match=r"learner 'clash'.*ldminv: K int64, clash: K string"):
            task_schemas("clash")
    finally:
        sys.modules.pop("clash_learner.task", None)
        sys.modules.pop("clash_learner", None)
