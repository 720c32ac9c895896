"""The equality a batched run owes its single run (issue 16): status, steps, divergence step, flops,
every summary value and every curve value, floats to a relative tolerance (float64: 1e-12), NaN equal
to NaN, everything else exactly. Shared by the batched-path tests of every task."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tasks.base import Result

RTOL_FLOAT64 = 1e-12


def _close(a: Any, b: Any, rtol: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or abs(a - b) <= rtol * max(abs(a), abs(b))
    return bool(a == b) and type(a) is type(b)


def assert_same_result(single: Result, batched: Result, rtol: float = RTOL_FLOAT64, label: str = "") -> None:
    where = f"{label}: " if label else ""
    assert batched.status == single.status, f"{where}status {batched.status} != {single.status}"
    assert batched.n_steps == single.n_steps, f"{where}n_steps {batched.n_steps} != {single.n_steps}"
    assert batched.diverged_step == single.diverged_step, f"{where}diverged_step"
    assert batched.error == single.error, f"{where}error"
    assert _close(float(single.flops), float(batched.flops), rtol), f"{where}flops {batched.flops} != {single.flops}"
    assert batched.summary.keys() == single.summary.keys(), f"{where}summary keys"
    for key, value in single.summary.items():
        assert _close(value, batched.summary[key], rtol), f"{where}summary {key}: {batched.summary[key]} != {value}"
    assert batched.curve.keys() == single.curve.keys(), f"{where}curve columns"
    for key, column in single.curve.items():
        other = list(batched.curve[key])
        assert len(other) == len(column), f"{where}curve {key} length {len(other)} != {len(column)}"
        for step, (a, b) in enumerate(zip(column, other, strict=True)):
            assert _close(a, b, rtol), f"{where}curve {key}[{step}]: {b} != {a}"


def assert_same_results(singles: Sequence[Result], batched: Sequence[Result], rtol: float = RTOL_FLOAT64) -> None:
    assert len(batched) == len(singles)
    for n, (a, b) in enumerate(zip(singles, batched, strict=True)):
        assert_same_result(a, b, rtol, label=f"member {n}")
