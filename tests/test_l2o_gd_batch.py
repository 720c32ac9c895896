"""l2o_gd as a BatchableTask (issue 16): GD runs that differ in seed, step rule, step and logging cadence, and
learner runs that differ in seed, lr and e, run as one batched computation whose results equal the single runs;
a diverging member and a pruned member stop alone at their own step; the batch computes on the given device.

Tolerance: GD members are bitwise equal to their single runs on the CPU (one gemv per instance either way), but
the tests hold them, like the learner, to 1e-12 relative. A learner batch multiplies (K, N d, n) activations by
K nets in one batched matmul, which may round otherwise than the single run's matmul (measured: 1e-16
relative). The improvement ratios are differences of nearly equal objectives over F_GD, so their rounding is
absolute (~1e-16) and relative comparison means nothing where r ~ 0 (e = 1 gives r ~ 3e-7): every number
must agree to 1e-12 relative or 1e-14 absolute."""

from __future__ import annotations

import dataclasses
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
REL, ABS = 1e-12, 1e-14
SHAPE = {"algo": "gd", "d": 16, "b": 10, "n_problems": 4, "T": 40}


def params(**kw: Any) -> Any:
    return ADAPTER.validate_python({**SHAPE, **kw})


MEMBERS = [
    params(seed=0),
    params(seed=1, step_rule="two_over", log_every=3),
    params(seed=2, c=1.5, log_every=7),
    params(seed=0, c=1.9, data_seed=5),
]


def _close(a: Any, b: Any, rel: float, abs_tol: float = ABS) -> bool:
    if isinstance(a, str) and a[:1] in "[{":  # trajectories, checkpoints and per-instance ratios as JSON
        return _close(json.loads(a), json.loads(b), rel, abs_tol)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], rel, abs_tol) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_close(x, y, rel, abs_tol) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=abs_tol if rel else 0.0) or (math.isnan(a) and math.isnan(b))
    return bool(a == b)


def assert_same(batched: Result, single: Result, rel: float = REL, abs_tol: float = ABS) -> None:
    """Everything a stored row and curve hold: status, steps, flops, every summary field and curve column."""
    assert (batched.status, batched.n_steps, batched.diverged_step) == (
        single.status,
        single.n_steps,
        single.diverged_step,
    )
    assert batched.flops == single.flops
    assert sorted(batched.summary) == sorted(single.summary)  # pytest shows which keys differ
    for key, value in single.summary.items():
        assert _close(batched.summary[key], value, rel, abs_tol), (key, batched.summary[key], value)
    assert sorted(batched.curve) == sorted(single.curve)
    for key, col in single.curve.items():
        assert _close(list(batched.curve[key]), list(col), rel, abs_tol), key


def test_l2o_gd_is_batchable_and_keys_hold_only_what_fixes_shapes() -> None:
    assert isinstance(TASK, BatchableTask)
    assert len({TASK.batch_key(p) for p in MEMBERS}) == 1
    assert TASK.batch_key(params(T=41)) != TASK.batch_key(MEMBERS[0])
    assert TASK.batch_key(params(data="colnorm")) != TASK.batch_key(MEMBERS[0])
    assert TASK.batch_key(params(d=17)) != TASK.batch_key(MEMBERS[0])
    l2o = ADAPTER.validate_python(TASK.examples[0])
    assert TASK.batch_key(l2o) != TASK.batch_key(MEMBERS[0])
    for varied in ({"seed": 3}, {"lr": 1e-3}, {"e": 2.0}, {"init_seed": 4}, {"log_every": 1}, {"diag_every": 2}):
        assert TASK.batch_key(l2o.model_copy(update=varied)) == TASK.batch_key(l2o)
    for shaped in ({"n2": 25}, {"epochs": 5}, {"dtype": "float32"}, {"detach": False}, {"T": 11}):
        assert TASK.batch_key(l2o.model_copy(update=shaped)) != TASK.batch_key(l2o)
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


def test_a_mixed_list_runs_key_by_key_in_order() -> None:
    l2o = ADAPTER.validate_python(TASK.examples[0])
    out = TASK.run_batch([l2o, MEMBERS[0], MEMBERS[1]], [RunContext(), RunContext(), RunContext()])
    assert_same(out[0], TASK.run(l2o, RunContext()))
    assert_same(out[1], TASK.run(MEMBERS[0], RunContext()))
    assert_same(out[2], TASK.run(MEMBERS[1], RunContext()))


def _learners(dtype: str = "float64") -> list[Any]:
    base = {**TASK.examples[0], "dtype": dtype, "diag_every": 2, "traj_every": 1}
    # e = 1 barely moves (r_T = 4.5e-7): the ratios' absolute tolerance matters there
    return [
        ADAPTER.validate_python({**base, **kw})
        for kw in ({"seed": 0}, {"seed": 1, "lr": 3e-4, "e": 5.0}, {"seed": 0, "lr": 1e-5, "e": 1.0, "log_every": 1})
    ]


def test_learner_batch_equals_single_runs_in_float64() -> None:
    ps = _learners()
    batched = TASK.run_batch(ps, [RunContext() for _ in ps])
    for b, p in zip(batched, ps, strict=True):
        b.validate(TASK)
        assert b.status == "ok" and b.curve["step"][-1] == p.epochs
        assert_same(b, TASK.run(p, RunContext()))
    assert len({r.summary["imp_last"] for r in batched}) == 3  # every member trained with its own lr and e
    assert batched[0].curve["imp_last"][0] == 0.0  # each member starts as GD exactly (alignment, sec. 5.1)


def test_learner_batch_with_a_pruned_member() -> None:
    ps = _learners()
    ctxs = [RunContext(), RunContext(reporter=_stop_after(2)), RunContext()]
    batched = TASK.run_batch(ps, ctxs)
    assert [r.status for r in batched] == ["ok", "pruned", "ok"]
    assert batched[1].curve["step"][-1] == 2 and batched[1].n_steps == 2
    assert_same(batched[1], TASK.run(ps[1], RunContext(reporter=_stop_after(2))))
    # the others go on after it left the batch, as if it had never been there
    assert_same(batched[2], TASK.run(ps[2], RunContext()))


def test_learner_batch_in_float32_agrees_with_single_runs() -> None:
    # float32 training (net and trajectories), ratios re-evaluated in float64 from the float32 weights (G14):
    # the batched matmul may round otherwise than the single one by an ulp of float32 (eps 1.2e-7); measured
    # 1.0e-7 relative at worst over these curves. 1e-6 allows a few ulps carried through the 4 epochs
    ps = _learners("float32")
    batched = TASK.run_batch(ps, [RunContext() for _ in ps])
    for b, p in zip(batched, ps, strict=True):
        single = TASK.run(p, RunContext())
        assert b.status == single.status == "ok"
        for key in ("loss", "imp_last", "imp_mean", "p_mean"):
            assert _close(list(b.curve[key]), list(single.curve[key]), 1e-6), key


def test_members_of_different_keys_are_rejected() -> None:
    from tasks.l2o_gd.task import run_gd_batch

    ps: list[GDParams] = [MEMBERS[0], params(T=41)]
    with pytest.raises(ValueError, match="one batch key"):
        run_gd_batch(ps, [RunContext(), RunContext()])


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: the batch on ctx.device = 'cuda'")


@CUDA
def test_batch_on_cuda_equals_single_runs_on_the_cpu() -> None:
    # float64 on both devices; the GPU's reductions sum in another order, so equal to 1e-12 relative, not bitwise
    batched = TASK.run_batch(MEMBERS, [RunContext(device="cuda") for _ in MEMBERS])
    for b, p in zip(batched, MEMBERS, strict=True):
        assert_same(b, TASK.run(p, RunContext()))


@CUDA
def test_learner_batch_on_cuda_equals_single_runs_on_the_cpu() -> None:
    # float64 (TF32 touches float32 matmuls only); the ranks and alpha_0 of the SVD diagnostics come from the same
    # float64 hidden outputs up to rounding
    # The improvement ratios r = 1 - F_L2O / F_GD are near 0 after a few epochs (training starts as exact GD):
    # F to 1e-12 relative gives r to 1e-12 absolute, not relative (an H200 gave 4.1474240891e-06 against the
    # CPU's 4.1474240603e-06, 3e-14 apart). C11's ratio divides ||X^{k+1} - X^k||, a difference of nearly equal
    # iterates, so its rounding grows by ||X|| / ||X^{k+1} - X^k||: its log10 agreed to 3e-11 there, held to 1e-9.
    ps = _learners()
    batched = TASK.run_batch(ps, [RunContext(device="cuda") for _ in ps])
    for b, p in zip(batched, ps, strict=True):
        single = TASK.run(p, RunContext())
        semi = [k for k in single.summary if "semi_smooth" in k]
        assert semi and all(_close(b.summary[k], single.summary[k], 1e-9, 1e-9) for k in semi), semi
        assert _close(list(b.curve["log10_semi_smooth"]), list(single.curve["log10_semi_smooth"]), 1e-9, 1e-9)
        assert_same(_without_semi_smooth(b), _without_semi_smooth(single), abs_tol=1e-12)


def _without_semi_smooth(r: Result) -> Result:
    return dataclasses.replace(
        r,
        summary={k: v for k, v in r.summary.items() if "semi_smooth" not in k},
        curve={k: v for k, v in r.curve.items() if "semi_smooth" not in k},
    )
