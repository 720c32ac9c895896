"""A learner's results change only with its version (tests/pinned_results.py says why and how to pin)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tasks import get_task
from tasks.registry import builtin_task_names
from tests.pinned_results import PIN_FILE, differences, example_results

PINNED: dict[str, Any] = json.loads(PIN_FILE.read_text())


@pytest.mark.parametrize("name", builtin_task_names())
def test_results_change_only_with_the_version(name: str) -> None:
    assert name in PINNED, f"{name} has no pinned results: run `python -m tests.pinned_results`"
    pinned, version = PINNED[name], get_task(name).version
    got = example_results(name)
    if pinned["version"] != version:
        pytest.fail(
            f"{name} is at version {version} but its pinned results are version {pinned['version']}'s: "
            "pin the new version's results with `python -m tests.pinned_results`"
        )
    if [r["params"] for r in pinned["results"]] != [r["params"] for r in got]:
        pytest.fail(f"{name}'s examples changed: pin their results with `python -m tests.pinned_results`")
    added: list[str] = []
    found = differences(pinned["results"], got, name, added)
    assert not found, (
        f"{name}'s results changed while its version stayed {version} (bump `version` in tasks/{name}/params.py, "
        f"then `python -m tests.pinned_results`): " + "; ".join(found[:5])
    )
    assert not added, (
        f"{name} gained result fields, its pinned ones unchanged (no version bump needed: older runs read them "
        f"as null): pin them with `python -m tests.pinned_results`: {', '.join(sorted(set(added))[:8])}"
    )


def test_a_changed_result_is_caught() -> None:
    """The comparison itself: a float moved past 1e-6, a step more, a status, a curve row less."""
    base = {"status": "ok", "n_steps": 10, "summary": {"err": 0.125, "it": 7}, "curve": {"err": [1.0, 0.5]}}
    assert differences(base, json.loads(json.dumps(base))) == []
    grown = {**base, "summary": {"err": 0.125, "it": 7, "new": 1.0}}
    added: list[str] = []
    assert differences(base, grown, "t", added) == [] and added == ["t.summary.new"]
    assert differences(base, grown), "a new field is a difference where none is allowed"
    assert differences(grown, base, "t", []), "a field lost always is"
    assert differences(base, {**base, "summary": {"err": 0.125 * (1 + 1e-9), "it": 7}}) == []
    for changed in (
        {**base, "summary": {"err": 0.125 * (1 + 1e-5), "it": 7}},
        {**base, "summary": {"err": 0.125, "it": 8}},
        {**base, "n_steps": 11},
        {**base, "status": "diverged"},
        {**base, "curve": {"err": [1.0]}},
        {**base, "summary": {"err": "nan", "it": 7}},
    ):
        assert differences(base, changed), changed
