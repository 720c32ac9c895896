"""deep_linear and least_squares batched (run_batch) against one run at a time: every algorithm the
batch covers, members that diverge, stop at the tolerance, get pruned or run past their deadline, each
at its own step with its single run's record."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
import torch

from runner.grid.identity import validate_params
from tasks.base import Result, RunContext, is_diverged
from tasks.deep_linear import batched
from tasks.deep_linear.batch_tracker import DIVERGED_ABOVE
from tasks.deep_linear.flops import FlopCounter, numpy_product, stack_product
from tasks.deep_linear.task import DeepLinearTask
from tasks.deep_linear.tracker import prepare
from tasks.least_squares.task import LeastSquaresTask
from tasks.status import DIVERGED, OK, PRUNED, TIMEOUT
from tests.batch_equality import assert_same_results

DL = DeepLinearTask()
LS = LeastSquaresTask()
SHAPE = {"d_in": 6, "d_out": 3, "m": 20, "L": 4, "width": 7, "n_iters": 60}


def _params(task: Any, configs: list[dict[str, Any]]) -> list[Any]:
    return [validate_params(task, c) for c in configs]


def _stop_at(step: int) -> Callable[[int, Mapping[str, float]], bool]:
    """A pruner's verdict: go on until `step`, stop there."""
    return lambda s, _metrics: s < step


def _singles_and_batch(task: Any, ps: list[Any], reporters: dict[int, Any] | None = None) -> tuple[list, list]:
    reporters = reporters or {}
    singles = [task.run(p, RunContext(reporter=reporters.get(i))) for i, p in enumerate(ps)]
    batch = task.run_batch(ps, [RunContext(reporter=reporters.get(i)) for i in range(len(ps))])
    return singles, batch


CASES = {
    # step sizes that converge, and one that diverges (at a seed-dependent step)
    "gd": [{"algo": "gd", "lr": lr, "seed": s} for lr in (0.02, 0.3, 4.0) for s in (1, 2)],
    "gd_du_hu": [{"algo": "gd", "lr_rule": "du_hu", "seed": s} for s in (1, 2, 3)],
    "bcgd_desc": [{"algo": "bcgd", "seed": s, "stop_at_tol": s == 2, "tol": 1e-6} for s in (1, 2, 3)],
    "bcgd_asc": [{"algo": "bcgd", "order": "asc", "seed": s, "grad_scale": 1 + s % 2} for s in (1, 2, 3)],
    "bcgd_const": [{"algo": "bcgd", "lr_rule": "const", "lr": lr, "seed": 4} for lr in (0.02, 0.1, 6.0)],
    # m = 4 < d_in: an X of rank 4 beside ones of rank 6, so the errors are taken member by member
    "gd_ranks": [{"algo": "gd", "lr": 0.02, "seed": s, "m": m} for s, m in ((1, 4), (2, 20), (3, 5))],
    "bcgd_ranks": [{"algo": "bcgd", "seed": s, "m": m} for s, m in ((1, 20), (2, 4))],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_deep_linear_batch_members_equal_their_single_runs(case: str) -> None:
    ps = _params(DL, [{**SHAPE, "log_every": 3, **c} for c in CASES[case]])
    assert len({DL.batch_key(p) for p in ps}) == 1
    singles, batch = _singles_and_batch(DL, ps)
    assert_same_results(singles, batch)
    if case in ("gd", "bcgd_const"):  # the largest step diverges, alone, at its own step
        assert [r.status for r in batch].count(DIVERGED) >= 1 and [r.status for r in batch].count(OK) >= 2
        assert len({r.diverged_step for r in batch if r.status == DIVERGED} | {None}) >= 2
    if case == "bcgd_desc":
        assert batch[1].n_steps < SHAPE["n_iters"] == batch[0].n_steps  # the early stop is the member's own
    if case.endswith("_ranks"):
        setups = [prepare(p, DL.summary_fields) for p in ps]
        assert not batched._Errors(setups, numpy_product).stacked


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_stacked_product_is_each_matrix_s_own_whatever_the_stack(dtype: torch.dtype) -> None:
    """A stack's kernel (numpy's for float64, torch's for float32): each member's rows equal, bit for bit,
    its product as a stack of one (how its single run computes), transposed operands included, and equal
    torch's product to rounding."""
    product = stack_product([16, 8], dtype, "cpu")
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(9, 16, 16, generator=g, dtype=dtype) for _ in range(2))
    r = torch.randn(9, 8, 16, generator=g, dtype=dtype)
    for x, y in ((a, b), (r, a.mT), (a.mT, r.mT), (r, b)):
        stack = product(x, y)
        assert stack.dtype == dtype and stack.shape == (9, x.shape[-2], y.shape[-1])
        for i in range(9):
            assert torch.equal(product(x[i : i + 1], y[i : i + 1])[0], stack[i])
        torch.testing.assert_close(stack, x @ y)


def test_stacks_go_to_numpy_only_where_it_pays() -> None:
    """numpy's matmul for small float64 stacks on the CPU; torch's for float32, for matrices past what
    OpenBLAS computes on one thread (numpy's would spread over every core), and on a GPU."""
    assert stack_product([16, 64, 8], torch.float64, "cpu") is numpy_product
    for dims, dtype, device in (
        ([16, 65, 8], torch.float64, "cpu"),
        ([16], torch.float32, "cpu"),
        ([16], torch.float64, "cuda"),
    ):
        assert stack_product(dims, dtype, device) is torch.matmul
    counter = FlopCounter(numpy_product)
    a = torch.randn(3, 4, 5, dtype=torch.float64)
    assert torch.equal(counter.mm(a, a.mT), torch.from_numpy(np.matmul(a.numpy(), a.mT.numpy())))
    assert counter.total == 2 * 4 * 5 * 4


def test_a_pruned_and_a_timed_out_member_stop_alone_at_their_own_step() -> None:
    ps = _params(DL, [{**SHAPE, "algo": "gd", "lr": 0.05, "seed": s, "log_every": 5} for s in range(4)])
    singles, batch = _singles_and_batch(DL, ps, reporters={1: _stop_at(25)})
    assert_same_results(singles, batch)
    assert [r.status for r in batch] == [OK, PRUNED, OK, OK]
    assert batch[1].n_steps == 25 and batch[1].curve["step"][-1] == 25
    # a member whose deadline has passed stops at step 0, the others run on
    ctxs = [RunContext(deadline=time.time() - 1 if i == 2 else None) for i in range(4)]
    late = DL.run_batch(ps, ctxs)
    assert [r.status for r in late] == [OK, OK, TIMEOUT, OK] and late[2].n_steps == 0
    assert_same_results([singles[0], singles[3]], [late[0], late[3]])


def test_deep_linear_configs_outside_the_batched_algorithms_run_alone() -> None:
    assert DL.batch_key(validate_params(DL, {**SHAPE, "algo": "bcsgd"})) is None
    assert DL.batch_key(validate_params(DL, {**SHAPE, "algo": "bcgd", "loss": "l4"})) is None
    assert DL.batch_key(validate_params(DL, {**SHAPE, "algo": "bcgd", "lr_rule": "thm32", "eta_bar": 0.5})) is None
    one_column = {**SHAPE, "L": 2, "width": 1}  # a product with one column: batch-size dependent rounding
    assert DL.batch_key(validate_params(DL, {**one_column, "algo": "gd", "lr": 0.1})) is None
    gd, bcgd = (validate_params(DL, {**SHAPE, "algo": a, **extra}) for a, extra in (("gd", {"lr": 0.1}), ("bcgd", {})))
    assert DL.batch_key(gd) != DL.batch_key(bcgd)
    with pytest.raises(ValueError, match="one batch key"):
        DL.run_batch([gd, bcgd], [RunContext(), RunContext()])


def test_least_squares_batch_members_equal_their_single_runs() -> None:
    shape = {"d_in": 8, "d_out": 3, "m": 30, "log_every": 7}
    configs = [{**shape, "lr": lr, "seed": s} for lr in (0.05, 5.0) for s in (1, 2)]
    configs.append({"d_in": 8, "d_out": 3, "m": 45, "lr_rule": "optimal", "n_iters": 300})
    ps = _params(LS, configs)
    assert len({LS.batch_key(p) for p in ps}) == 1
    singles, batch = _singles_and_batch(LS, ps, reporters={1: _stop_at(14)})
    assert_same_results(singles, batch)
    statuses = [r.status for r in batch]
    assert statuses[1] == PRUNED and DIVERGED in statuses and batch[4].summary["iters_to_tol"] > 0


# Batches mixing every way a member ends, each member with its own budget, tolerance and cadence (the
# batch key lets them differ): converging, crossing the tolerance and going on, stopping at it, rising
# errors, diverging, pruned by its reporter, past its deadline before it starts.
MIXED_SHAPE = {"d_in": 6, "d_out": 3, "m": 20, "L": 4, "width": 7}
MIXED = {
    "gd": [
        {"lr": 0.05, "tol": 1e-6, "stop_at_tol": True, "n_iters": 120},
        {"lr": 0.05, "tol": 1e-6, "n_iters": 90, "log_every": 7},
        {"lr": 0.1, "n_iters": 60, "log_every": 5},  # the error rises at times
        {"lr": 0.25, "n_iters": 60},  # diverges
        {"lr": 0.02, "n_iters": 60, "log_every": 5},  # pruned at 30
        {"lr": 0.02, "n_iters": 40, "seed": 2},  # past its deadline
    ],
    "bcgd_const": [
        {"lr": 0.1, "tol": 1e-7, "stop_at_tol": True, "n_iters": 120},
        {"lr": 0.1, "tol": 1e-7, "n_iters": 90, "log_every": 7},
        {"lr": 0.25, "n_iters": 120, "log_every": 5},  # the error rises near its floor
        {"lr": 6.0, "n_iters": 60},
        {"lr": 0.02, "n_iters": 60, "log_every": 5},
        {"lr": 0.02, "n_iters": 40, "seed": 2},
    ],
    "bcgd_opt": [
        {"tol": 1e-12, "stop_at_tol": True, "n_iters": 120},
        {"tol": 1e-12, "n_iters": 100, "log_every": 7, "seed": 2},
        {"grad_scale": 2, "n_iters": 60, "log_every": 5, "seed": 3},  # twice the exact step: no progress
        {"n_iters": 60, "seed": 4, "log_every": 3},
        {"n_iters": 60, "log_every": 5, "seed": 5},
        {"n_iters": 40, "seed": 6},
    ],
}
ALGO = {"gd": {"algo": "gd"}, "bcgd_const": {"algo": "bcgd", "lr_rule": "const"}, "bcgd_opt": {"algo": "bcgd"}}


def _mixed_run(case: str, per_member: bool) -> tuple[list[Result], list[list[tuple[int, float]]]]:
    """The mixed batch of `case`, with the books kept per member or batched, and the reports each member
    gave: member 4 is pruned at step 30, member 5 (no reporter) is past its deadline."""
    ps = _params(DL, [{**MIXED_SHAPE, **ALGO[case], "seed": 1, **c} for c in MIXED[case]])
    assert len({DL.batch_key(p) for p in ps}) == 1
    calls: list[list[tuple[int, float]]] = [[] for _ in ps]

    def reporter(i: int) -> Callable[[int, Mapping[str, float]], bool]:
        def report(step: int, metrics: Mapping[str, float]) -> bool:
            calls[i].append((step, metrics["err"]))
            return i != 4 or step < 30

        return report

    ctxs = [RunContext(reporter=reporter(i)) for i in range(5)] + [RunContext(deadline=time.time() - 1)]
    return batched.run_batch(ps, ctxs, DL.summary_fields, per_member=per_member), calls


@pytest.mark.parametrize("case", sorted(MIXED))
def test_batched_books_equal_one_tracker_per_member_exactly(case: str) -> None:
    reference, reference_calls = _mixed_run(case, per_member=True)
    batch, calls = _mixed_run(case, per_member=False)
    assert_same_results(reference, batch, rtol=0.0)
    assert calls == reference_calls  # every report: same steps, same errors, same order
    for a, b in zip(reference, batch, strict=True):  # Python scalars, as a Tracker gives (Parquet types)
        assert [type(v) for v in b.summary.values()] == [type(v) for v in a.summary.values()]
        assert {k: {type(v) for v in col} for k, col in b.curve.items()} == {
            k: {type(v) for v in col} for k, col in a.curve.items()
        }
        # the shared math.nan object where a Tracker leaves it, so `==` on two runs' results keeps holding
        for one, other in ((a.summary, b.summary), *((a.curve[k], b.curve[k]) for k in a.curve)):
            keys = list(one.keys()) if isinstance(one, dict) else range(len(one))
            assert [k for k in keys if one[k] is math.nan] == [k for k in keys if other[k] is math.nan]
    # the batch really mixes every way of ending
    statuses = [r.status for r in batch]
    assert statuses[4:] == [PRUNED, TIMEOUT] and batch[4].n_steps == 30 and batch[5].n_steps == 0
    assert statuses[0] == statuses[1] == OK and batch[0].n_steps == batch[0].summary["iters_to_tol"] > 0
    assert 0 < batch[1].summary["iters_to_tol"] < batch[1].n_steps == MIXED[case][1]["n_iters"]
    if case != "bcgd_opt":  # the exact line search neither raises the error nor diverges
        assert batch[2].summary["n_increase"] > 0
        assert statuses[3] == DIVERGED and batch[3].diverged_step == batch[3].n_steps == batch[3].curve["step"][-1]


def test_the_divergence_limit_is_is_divergeds() -> None:
    assert not is_diverged(DIVERGED_ABOVE) and is_diverged(math.nextafter(DIVERGED_ABOVE, math.inf))
