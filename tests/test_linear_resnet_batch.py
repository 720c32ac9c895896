"""linear_resnet's batched path: a batch of configs of one shape gives, member by member, what each
config's run alone gives (float64 to 1e-12 relative), with members that diverge, are pruned, stop
early or run longer stopping alone at their own step."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import torch
from pydantic import TypeAdapter

from tasks.base import BatchableTask, Result, RunContext
from tasks.linear_resnet.task import LinearResNetTask

RTOL = 1e-12
TASK = LinearResNetTask()
ADAPTER: TypeAdapter[Any] = TypeAdapter(LinearResNetTask.Params)


def close(a: Any, b: Any, rtol: float, where: str, atol: float = 1e-300) -> None:
    """Equal values: floats to `rtol` relative or `atol` absolute (NaN equals NaN), the rest exactly."""
    if isinstance(a, float) or isinstance(b, float):
        fa, fb = float(a), float(b)
        if math.isnan(fa) and math.isnan(fb):
            return
        assert math.isclose(fa, fb, rel_tol=rtol, abs_tol=atol), f"{where}: {fa!r} != {fb!r}"
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_same_result(
    batched: Result, alone: Result, rtol: float = RTOL, atol: Mapping[str, float] | None = None
) -> None:
    """A batched member's result equals its single run's: status, steps, flops, every summary metric
    and every curve point (`atol`: absolute tolerances of metrics that live at the rounding floor)."""
    atol = atol or {}
    assert (batched.status, batched.n_steps, batched.diverged_step) == (
        alone.status,
        alone.n_steps,
        alone.diverged_step,
    )
    assert batched.error == alone.error
    close(batched.flops, alone.flops, rtol, "flops")
    assert batched.summary.keys() == alone.summary.keys()
    for key, value in alone.summary.items():
        close(batched.summary[key], value, rtol, f"summary {key}", atol.get(key, 1e-300))
    assert batched.curve.keys() == alone.curve.keys()
    for key, column in alone.curve.items():
        assert len(batched.curve[key]) == len(column), f"curve {key} length"
        for i, (x, y) in enumerate(zip(batched.curve[key], column, strict=True)):
            close(x, y, rtol, f"curve {key}[{i}]")


class Recorder:
    """A reporter that records every call and answers False from step `prune_at` on (None: never)."""

    def __init__(self, prune_at: int | None = None) -> None:
        self.prune_at = prune_at
        self.calls: list[tuple[int, dict[str, float]]] = []

    def __call__(self, step: int, metrics: Mapping[str, float]) -> bool:
        self.calls.append((step, dict(metrics)))
        return self.prune_at is None or step < self.prune_at


def check_batch(
    task: BatchableTask,
    configs: Sequence[dict[str, Any]],
    adapter: TypeAdapter[Any],
    prune: Mapping[int, int] | None = None,
    device: str = "cpu",
    rtol: float = RTOL,
    atol: Mapping[str, float] | None = None,
) -> list[Result]:
    """Run `configs` as one batch and each alone (member i pruned from step prune[i] on in both), and
    assert equal results and equal report calls. Returns the single runs' results."""
    prune = prune or {}
    ps = [adapter.validate_python(c) for c in configs]
    assert len({task.batch_key(p) for p in ps}) == 1
    batch_rec = [Recorder(prune.get(i)) for i in range(len(ps))]
    alone_rec = [Recorder(prune.get(i)) for i in range(len(ps))]
    batched = task.run_batch(ps, [RunContext(device=device, reporter=r) for r in batch_rec])
    alone = [task.run(p, RunContext(reporter=r)) for p, r in zip(ps, alone_rec, strict=True)]
    for i, (b, a) in enumerate(zip(batched, alone, strict=True)):
        b.validate(task)
        assert_same_result(b, a, rtol, atol)
        assert [s for s, _ in batch_rec[i].calls] == [s for s, _ in alone_rec[i].calls], f"member {i} reports"
        for (_, mb), (_, ma) in zip(batch_rec[i].calls, alone_rec[i].calls, strict=True):
            for key in ma:
                close(mb[key], ma[key], rtol, f"member {i} report {key}")
    return alone


BASE: dict[str, dict[str, Any]] = {
    "gd-resnet-gram": {"algo": "gd", "form": "gram"},
    "gd-standard-direct": {"algo": "gd", "model": "standard", "form": "direct"},
    "sgd-gram": {"algo": "sgd", "form": "gram", "batch_size": 20},
    "sgd-direct": {"algo": "sgd", "form": "direct", "batch_size": 20},
}


def members(base: dict[str, Any]) -> list[dict[str, Any]]:
    """Six members of one shape: mixed seeds, transforms, step rules, budgets, cadences and stops;
    member 2's step (c ~ 27) diverges, member 3 is pruned by its reporter (see the test)."""
    shape = {"m": 20, "depth": 3, "n": 100, "n_iters": 60, "log_every": 5, **base}
    sgd = base["algo"] == "sgd"
    return [
        {**shape, "seed": 0},
        {**shape, "seed": 1, "c": 0.3, "transform": "modified_identity", "alpha": 2.0, "log_every": 3},
        {**shape, "seed": 2, "eta": 0.005},
        {**shape, "seed": 3, "n_iters": 80, "log_every": 4, "data_seed": 0},
        {**shape, "seed": 4, "stop_rel": 0.12, "target": "gaussian", "noise": 0.0},
        {
            **shape,
            "seed": 5,
            "transform": "identity",
            "c": 1.0,
            "n_iters": 30,
            **({"sampling": "reshuffle"} if sgd else {}),
        },
    ]


@pytest.mark.parametrize("variant", sorted(BASE))
def test_batch_equals_single_runs(variant: str) -> None:
    alone = check_batch(TASK, members(BASE[variant]), ADAPTER, prune={3: 20})
    statuses = [r.status for r in alone]
    # The batch really holds a diverging, a pruned and an early-stopping member among running ones.
    assert statuses[2] == "diverged" and statuses[3] == "pruned" and statuses[0] == "ok", statuses
    assert alone[3].n_steps == 20
    assert alone[4].n_steps < 60 and alone[4].summary["rel_subopt_final"] <= 0.12
    assert alone[5].n_steps == 30 and alone[0].n_steps == 60


def test_members_of_one_seed_differ_only_in_their_step() -> None:
    """Same data and transforms, three step constants: a batch of one data set, still member-exact."""
    shape = {"algo": "gd", "m": 20, "depth": 3, "n": 100, "n_iters": 40, "seed": 7}
    alone = check_batch(TASK, [{**shape, "c": c} for c in (0.1, 0.5, 2.0)], ADAPTER)
    finals = [r.summary["loss_final"] for r in alone]
    assert len(set(finals)) == 3


def test_batch_key_separates_shapes_and_algorithms() -> None:
    assert isinstance(TASK, BatchableTask)  # the executor recognises the batched path by this protocol
    key = TASK.batch_key
    gd = ADAPTER.validate_python({"algo": "gd", "m": 20, "n": 100})
    assert key(gd) == key(ADAPTER.validate_python({"algo": "gd", "m": 20, "n": 100, "seed": 3, "c": 0.1}))
    for other in ({"m": 24}, {"depth": 4}, {"form": "direct"}, {"dtype": "float32"}, {"model": "standard"}):
        assert key(gd) != key(ADAPTER.validate_python({"algo": "gd", "m": 20, "n": 100, **other})), other
    sgd = ADAPTER.validate_python({"algo": "sgd", "m": 20, "n": 100, "batch_size": 20})
    assert key(sgd) != key(gd)
    assert key(sgd) != key(ADAPTER.validate_python({"algo": "sgd", "m": 20, "n": 100, "batch_size": 10}))
    assert TASK.batch_bytes(gd) > 0
    assert TASK.batch_bytes(ADAPTER.validate_python({"algo": "gd", "m": 20, "n": 100, "form": "direct"})) > (
        TASK.batch_bytes(gd)
    )


def test_a_batch_of_two_keys_is_refused() -> None:
    ps = [ADAPTER.validate_python({"algo": "gd", "m": m, "n": 100, "n_iters": 2}) for m in (20, 24)]
    with pytest.raises(ValueError, match="one batch key"):
        TASK.run_batch(ps, [RunContext(), RunContext()])


def test_float32_batch_agrees_with_single_runs() -> None:
    """float32: batched kernels may sum in another order than the single ones (other BLAS, GPU). A rounding
    difference of ~1e-7 per op is damped by a contracting iteration, not amplified, so 1e-4 relative holds
    with margin; on this CPU's kernels the two agree exactly (measured: 0)."""
    shape = {"algo": "gd", "m": 20, "depth": 3, "n": 100, "n_iters": 60, "dtype": "float32"}
    check_batch(TASK, [{**shape, "seed": s} for s in range(3)], ADAPTER, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")
def test_batch_computes_on_cuda() -> None:
    """On ctx.device = cuda the batch allocates there and agrees with the CPU single runs (float64; other
    kernels, so rounding differs: 1e-9 relative)."""
    torch.cuda.reset_peak_memory_stats()
    check_batch(TASK, members(BASE["gd-resnet-gram"])[:2], ADAPTER, device="cuda", rtol=1e-9)
    assert torch.cuda.max_memory_allocated() > 0
