"""The conformance suite every registered task must pass (one suite, every implementation)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from runner.execute.base import WorkItem
from runner.execute.worker import run_item
from runner.grid.identity import canonical_json, run_id, validate_params
from runner.grid.schema import curves_schema, runs_schema, task_schemas
from runner.store import ResultStore
from runner.store.flush import write_records
from tasks import RunContext, TaskSpec, get_spec, get_task
from tasks.registry import builtin_task_names
from tests.conftest import done_ids

TASKS = builtin_task_names()


def _examples(name: str) -> list[tuple[str, dict[str, Any]]]:
    task = get_task(name)
    return [(name, ex) for ex in task.examples]


EXAMPLES = [case for name in TASKS for case in _examples(name)]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


@pytest.mark.parametrize("name", TASKS)
def test_declares_the_protocol(name: str) -> None:
    task = get_task(name)
    assert task.name == name and task.version
    assert task.examples, "each task declares example configs"
    runs_schema(task)  # every param type maps to a column, no name clashes
    curves_schema(task)
    assert set(task.summary_fields.values()) <= {"float", "int", "bool", "str"}


@pytest.mark.parametrize("name", TASKS)
def test_the_light_spec_is_the_tasks_identity(name: str) -> None:
    """The driver plans from params.SPEC (no torch), workers run the Task: both must give one run id."""
    spec, task = get_spec(name), get_task(name)
    assert isinstance(spec, TaskSpec), f"tasks/{name}/params.py defines no SPEC: planning would import torch"
    assert (spec.name, spec.version, spec.Params) == (task.name, task.version, task.Params)
    for raw in task.examples:
        assert run_id(spec, validate_params(spec, raw)) == run_id(task, validate_params(task, raw))


@pytest.mark.parametrize(("name", "raw"), EXAMPLES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(EXAMPLES)])
def test_example_runs_validly_and_reproducibly(name: str, raw: dict[str, Any]) -> None:
    task = get_task(name)
    params = validate_params(task, raw)
    dumped = params.model_dump(mode="json")
    again = validate_params(task, dumped)
    assert again == params and run_id(task, again) == run_id(task, params)
    canonical_json(dumped)  # JSON-clean: no NaN, no objects
    first = task.run(params, RunContext())
    first.validate(task)
    assert first.status in ("ok", "diverged")
    assert first.n_steps > 0 and first.flops >= 0
    second = task.run(validate_params(task, raw), RunContext())
    assert first.curve.keys() == second.curve.keys()
    for key in first.curve:
        assert all(_same(float(a), float(b)) for a, b in zip(first.curve[key], second.curve[key], strict=True)), key
    assert first.summary.keys() == second.summary.keys()
    assert all(_same(first.summary[k], second.summary[k]) for k in first.summary), "same seed, same summary"


@pytest.mark.parametrize("name", [n for n in TASKS if get_task(n).diverging_example is not None])
def test_diverging_example_is_recorded_as_diverged(name: str, tmp_path: Path) -> None:
    task = get_task(name)
    params = validate_params(task, task.diverging_example)
    record = run_item(WorkItem(run_id(task, params), name, params.model_dump(mode="json")))
    assert record.status == "diverged", record.row.get("error")
    assert record.row["diverged_step"] is not None and record.row["diverged_step"] >= 1
    store = ResultStore(tmp_path)
    write_records(store, [record], task_schemas)
    assert done_ids(store, name) == {record.run_id}


@pytest.mark.parametrize("name", TASKS)
def test_stops_when_report_says_stop(name: str) -> None:
    task = get_task(name)
    params = validate_params(task, task.examples[0])
    result = task.run(params, RunContext(reporter=lambda step, metrics: False))
    assert result.status == "pruned"
