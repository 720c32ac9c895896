"""Every shipped learner's results on its own examples, pinned per learner version.

A run id is sha256 of {task, version, params}: a change to a learner that alters what its runs compute,
made without bumping its `version`, would file new results under old run ids, and a store would mix the
two silently. tests/test_pinned_results.py reruns every example (and the diverging one) and compares
with the results pinned here for the learner's current version; when a learner's version is bumped on
purpose, pin its new results:

    python -m tests.pinned_results            # rewrites tests/pinned_results.json for every learner

Floats are compared to a relative 1e-6: any change to an algorithm, a default or a schedule moves its
results by far more, while another CPU's BLAS (last bits, amplified along a run) does not fail the test.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import torch

from runner.grid.identity import validate_params
from tasks import RunContext, get_task
from tasks.registry import builtin_task_names

PIN_FILE = Path(__file__).with_name("pinned_results.json")
RTOL = 1e-6


def _value(v: Any) -> Any:
    """JSON-safe: non-finite floats as strings, sequences as lists, tensors/numpy scalars as numbers."""
    if hasattr(v, "item") and not isinstance(v, (list, tuple)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return [_value(x) for x in v]
    return v


def example_results(name: str) -> list[dict[str, Any]]:
    """What each example of `name` (its diverging one last) computes, as plain JSON data, on one thread
    (the runner's default `--threads 1`: a reduction split over threads rounds differently)."""
    torch.set_num_threads(1)
    task = get_task(name)
    raws = [*task.examples, *([task.diverging_example] if task.diverging_example else [])]
    out = []
    for raw in raws:
        r = task.run(validate_params(task, raw), RunContext())
        out.append(
            {
                "params": raw,
                "status": r.status,
                "n_steps": r.n_steps,
                "diverged_step": r.diverged_step,
                "flops": _value(float(r.flops)),
                "summary": {k: _value(v) for k, v in sorted(r.summary.items())},
                "curve": {k: _value(list(v)) for k, v in sorted(r.curve.items())},
            }
        )
    return out


def differences(want: Any, got: Any, where: str = "", added: list[str] | None = None) -> list[str]:
    """Where `got` differs from `want`: floats beyond RTOL, anything else at all. Where `added` is a list,
    keys `got` has and `want` lacks (a new summary field) go there instead: the values a stored run has
    are what counts for its run id, and a field added later reads as null for older runs."""
    if isinstance(want, dict) and isinstance(got, dict):
        extra = sorted(set(got) - set(want))
        if set(want) - set(got) or (extra and added is None):
            return [f"{where}: keys {sorted(want)} -> {sorted(got)}"]
        if added is not None:
            added += [f"{where}.{k}" for k in extra]
        return [d for k in want for d in differences(want[k], got[k], f"{where}.{k}", added)]
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return [f"{where}: {len(want)} values -> {len(got)}"]
        pairs = enumerate(zip(want, got, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{where}[{i}]", added)]
    if isinstance(want, float) or isinstance(got, float):
        if isinstance(want, bool) or isinstance(got, bool) or not isinstance(want, int | float):
            return [] if want == got else [f"{where}: {want!r} -> {got!r}"]
        if not isinstance(got, int | float) or not math.isclose(want, got, rel_tol=RTOL, abs_tol=1e-300):
            return [f"{where}: {want!r} -> {got!r}"]
        return []
    return [] if want == got else [f"{where}: {want!r} -> {got!r}"]


def pin_all() -> dict[str, Any]:
    return {
        name: {"version": get_task(name).version, "results": example_results(name)} for name in builtin_task_names()
    }


if __name__ == "__main__":
    PIN_FILE.write_text(json.dumps(pin_all(), indent=1, sort_keys=True) + "\n")
    print(f"pinned every learner's example results in {PIN_FILE}", file=sys.stderr)
