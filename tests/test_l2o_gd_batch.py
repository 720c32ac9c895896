"""l2o_gd as a BatchableTask (issue 16): GD runs that differ in seed, step rule, step and logging cadence run as
one batched computation whose results equal the single runs (float64: 1e-12 relative), a diverging member
and a pruned member stop alone at their own step, and the batch computes on the device it is given."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import pydantic
import pytest
import torch

from tasks.base import BatchableTask, Result, RunContext
from tasks.l2o_gd.params import GDParams
from tasks.l2o_gd.task import L2OGDTask

TASK = L2OGDTask()
ADAPTER = pydantic.TypeAdapter(TASK.Params)
REL = 1e-12
SHAPE = {"algo": "gd", "d": 16, "b": 10, "n_problems": 4, "T": 40}


def params(**kw: Any) -> Any:
    return ADAPTER.validate_python({**SHAPE, **kw})


MEMBERS = [
    params(seed=0),
    params(seed=1, step_rule="two_over", log_every=3),
    params(seed=2, c=1.5, log_every=7),
    params(seed=0, c=1.9, data_seed=5),
]


def _close(a: Any, b: Any, rel: float) -> bool:
    if isinstance(a, str) and a.startswith("["):  # trajectories and per-instance ratios as JSON lists
        return _close(json.loads(a), json.loads(b), rel)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=rel, abs_tol=0.0) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def assert_same(batched: Result, single: Result, rel: float = REL) -> None:
    """Everything a stored row and curve hold: status, steps, flops, every summary field and curve column."""
    assert (batched.status, batched.n_steps, batched.diverged_step) == (
        single.status,
        single.n_steps,
        single.diverged_step,
    )
    assert batched.flops == single.flops
    assert batched.summary.keys() == single.summary.keys()
    for key, value in single.summary.items():
        assert _close(batched.summary[key], value, rel), (key, batched.summary[key], value)
    assert batched.curve.keys() == single.curve.keys()
    for key, col in single.curve.items():
        assert _close(list(batched.curve[key]), list(col), rel), key


def test_l2o_gd_is_batchable_and_keys_hold_only_what_fixes_shapes() -> None:
    assert isinstance(TASK, BatchableTask)
    assert len({TASK.batch_key(p) for p in MEMBERS}) == 1
    assert TASK.batch_key(params(T=41)) != TASK.batch_key(MEMBERS[0])
    assert TASK.batch_key(params(data="colnorm")) != TASK.batch_key(MEMBERS[0])
    assert TASK.batch_key(params(d=17)) != TASK.batch_key(MEMBERS[0])
    assert TASK.batch_key(ADAPTER.validate_python(TASK.examples[0])) is None  # the learner runs alone
    # one member's problem (N b d) and trajectories (4 (T+1) N) in float64 at least
    assert TASK.batch_bytes(MEMBERS[0]) >= 8 * (4 * 10 * 16 + 4 * 41 * 4)


def test_batch_equals_single_runs_in_float64() -> None:
    singles = [TASK.run(p, RunContext()) for p in MEMBERS]
    batched = TASK.run_batch(MEMBERS, [RunContext() for _ in MEMBERS])
    assert [r.status for r in batched] == ["ok"] * len(MEMBERS)
    for b, s in zip(batched, singles, strict=True):
        b.validate(TASK)
        assert_same(b, s)
    # the members really differ (their own seeds, steps and cadences), and member 0's step is the reference GD
    assert len({r.summary["F_T_final"] for r in batched}) == len(MEMBERS)
    assert batched[0].summary["imp_last"] == 0.0 and batched[0].curve["step"] == list(range(41))
    assert batched[2].curve["step"] == [0, 7, 14, 21, 28, 35, 40]
    # the same seed with another data_seed is another problem
    assert batched[3].summary["beta"] != batched[0].summary["beta"]


def test_a_diverging_member_stops_alone_at_its_own_step() -> None:
    raw = dict(TASK.diverging_example or {})
    ps = [ADAPTER.validate_python({**raw, "c": c, "seed": s}) for c, s in ((1.0, 0), (3.9, 0), (1.99, 1))]
    batched = TASK.run_batch(ps, [RunContext() for _ in ps])
    singles = [TASK.run(p, RunContext()) for p in ps]
    assert [r.status for r in batched] == ["ok", "diverged", "ok"]
    assert batched[1].diverged_step is not None and batched[1].diverged_step < raw["T"]
    for b, s in zip(batched, singles, strict=True):
        assert_same(b, s)


def _stop_after(limit: int) -> Any:
    def reporter(step: int, _: Mapping[str, float]) -> bool:
        return step < limit

    return reporter


def test_a_pruned_member_stops_alone_with_its_single_runs_result() -> None:
    ctxs = [RunContext(), RunContext(reporter=_stop_after(12)), RunContext(), RunContext()]
    batched = TASK.run_batch(MEMBERS, ctxs)
    assert [r.status for r in batched] == ["ok", "pruned", "ok", "ok"]
    assert batched[1].curve["step"][-1] == 12  # log_every 3: steps 0, 3, ..., 12, the first answered False
    assert_same(batched[1], TASK.run(MEMBERS[1], RunContext(reporter=_stop_after(12))))
    assert_same(batched[2], TASK.run(MEMBERS[2], RunContext()))


def test_a_batch_of_mixed_algorithms_falls_back_to_single_runs() -> None:
    l2o = ADAPTER.validate_python(TASK.examples[0])
    out = TASK.run_batch([l2o, MEMBERS[0]], [RunContext(), RunContext()])
    assert_same(out[0], TASK.run(l2o, RunContext()))
    assert_same(out[1], TASK.run(MEMBERS[0], RunContext()))


def test_members_of_different_keys_are_rejected() -> None:
    from tasks.l2o_gd.task import run_gd_batch

    ps: list[GDParams] = [MEMBERS[0], params(T=41)]
    with pytest.raises(ValueError, match="one batch key"):
        run_gd_batch(ps, [RunContext(), RunContext()])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the batch on ctx.device = 'cuda'")
def test_batch_on_cuda_equals_single_runs_on_the_cpu() -> None:
    # float64 on both devices; the GPU's reductions sum in another order, so equal to 1e-12 relative, not bitwise
    batched = TASK.run_batch(MEMBERS, [RunContext(device="cuda") for _ in MEMBERS])
    for b, p in zip(batched, MEMBERS, strict=True):
        assert_same(b, TASK.run(p, RunContext()))
