"""deep_linear: the Task contract (examples, determinism, divergence, reporting) and the params schema."""

from __future__ import annotations

import typing

import pydantic
import pytest

from tasks.base import RunContext, TaskParams
from tasks.deep_linear.params import BCGDParams, BCSGDParams, GDParams
from tasks.deep_linear.task import DeepLinearTask
from tasks.registry import get_task

TASK = DeepLinearTask()
ADAPTER = pydantic.TypeAdapter(TASK.Params)


def params(**kw):
    return ADAPTER.validate_python(kw)


def test_registry_entry():
    assert type(get_task("deep_linear")).__name__ == "DeepLinearTask"


@pytest.mark.parametrize("raw", TASK.examples)
def test_examples_validate_round_trip_run_and_repeat(raw):
    p = ADAPTER.validate_python(raw)
    assert ADAPTER.validate_python(p.model_dump(mode="json")) == p
    res = TASK.run(p, RunContext())
    res.validate(TASK)
    assert res.status == "ok" and res.n_steps == p.n_iters and res.flops > 0
    assert set(res.summary) == set(TASK.summary_fields)
    assert TASK.run(p, RunContext()).curve == res.curve


def test_examples_cover_the_algorithms():
    assert {e["algo"] for e in TASK.examples} == {"bcgd", "gd", "bcsgd"}


def test_diverging_example():
    res = TASK.run(params(**TASK.diverging_example), RunContext())
    res.validate(TASK)
    assert res.status == "diverged" and 1 <= res.diverged_step <= 20
    assert res.summary["lr_used"] == pytest.approx(res.summary["lr_du_hu"])


def test_du_hu_diverges_in_the_fig1_setting():
    """Spec: eta = 10/(3 * 100 * 10.1) = 3.3e-3 at L = 100, 128 -> 10 diverges within 3 iterations."""
    res = TASK.run(params(algo="gd", lr_rule="du_hu", L=100, n_iters=50), RunContext())
    assert res.status == "diverged" and res.diverged_step <= 5
    assert 3.0e-3 < res.summary["lr_used"] < 3.6e-3


def test_summary_and_curve_types():
    res = TASK.run(params(algo="bcgd", d_in=8, d_out=3, m=30, L=3, n_iters=9, log_every=4), RunContext())
    pytypes = {"float": float, "int": int, "bool": bool, "str": str}
    assert res.summary["iters_to_tol"] is None  # 9 iterations never reach tol: null, not -1 (issue 28)
    assert res.summary["thm32_violations"] is None  # Thm 3.2 not checked: null, not -1 (issue 45)
    nullable = {"iters_to_tol", "thm32_violations"}
    for k, v in res.summary.items():
        assert v is None and k in nullable or isinstance(v, pytypes[TASK.summary_fields[k]]), k
    assert res.curve["step"] == [0, 4, 8, 9] and res.curve["layer"][0] == 0
    assert res.curve["sweep"] == [0, 4 / 3, 8 / 3, 3.0]


def test_report_false_stops_the_run():
    ctx = RunContext(reporter=lambda step, metrics: step < 10)
    res = TASK.run(params(algo="bcgd", d_in=8, d_out=3, m=30, L=3, n_iters=100), ctx)
    assert res.status == "pruned" and res.n_steps == 10
    res = TASK.run(params(algo="bcgd", d_in=8, d_out=3, m=30, n_iters=5), RunContext(deadline=0.0))
    assert res.status == "timeout"


def test_stop_at_tol_and_to_tol_fields():
    p = params(algo="bcgd", d_in=16, d_out=4, m=60, L=5, n_iters=500, stop_at_tol=True)
    res = TASK.run(p, RunContext())
    s = res.summary
    assert res.n_steps == s["iters_to_tol"] and s["sweeps_to_tol"] == s["iters_to_tol"] / 5
    assert s["err_final"] <= 1e-10 < res.curve["err"][-2]
    assert s["flops_to_tol"] == res.curve["flops"][-1]


def test_params_is_a_discriminated_union_of_task_params():
    assert typing.get_origin(TASK.Params) is typing.Annotated
    for cls in (BCGDParams, GDParams, BCSGDParams):
        assert issubclass(cls, TaskParams)
    assert isinstance(params(algo="gd", lr=1e-3), GDParams)


@pytest.mark.parametrize(
    "raw,match",
    [
        (dict(algo="bcgd", bogus=1), "bogus"),
        (dict(algo="bcgd", lr=0.1), "lr"),
        (dict(algo="bcgd", lr_rule="const"), "lr"),
        (dict(algo="bcgd", lr_rule="thm32"), "eta_bar"),
        (dict(algo="bcgd", lr_rule="thm32", eta_bar=2.5), "eta_bar"),
        (dict(algo="gd"), "lr"),
        (dict(algo="gd", lr_rule="du_hu", lr=1e-3), "lr"),
        (dict(algo="gd", lr=1e-3, order="asc"), "order"),  # a param gd does not use
        (dict(algo="gd", lr=1e-3, eta_bar=0.5), "eta_bar"),
        (dict(algo="bcgd", L=4, widths=[128, 128]), "widths"),
        (dict(algo="bcgd", L=3, width=64, widths=[64, 64]), "width"),
        (dict(algo="bcgd", init="zero"), "init"),
        (dict(algo="bcgd", cond_target=236.0), "cond_target"),
        (dict(algo="bcgd", data="gauss_bigcond", cond_rtol=0.1), "cond_rtol"),
        (dict(algo="bcgd", pixel_scale="raw"), "pixel_scale"),
        (dict(algo="bcgd", data_path="/tmp"), "data_path"),
        (dict(algo="bcgd", data="mnist", d_in=100), "d_in"),
        (dict(algo="bcgd", data="uci_ethanol", m=5000), "2565"),
        (dict(algo="bcgd", data="uci_ethanol", data_seed=1), "data_seed"),
        (dict(algo="bcgd", loss="l4", lr_rule="thm32", eta_bar=1.0), "l4"),
        (dict(algo="bcgd", l4_backtrack=True), "l4_backtrack"),
        (dict(algo="bcgd", check_thm32=True, loss="l4"), "check_thm32"),
        (dict(algo="bcgd", init="balanced", L=3, d_in=20, d_out=10, width=5), "balanced"),
        (dict(algo="bcgd", random_std=0.1), "random_std"),
        (dict(algo="bcsgd", eta_bar=None), "eta_bar"),
        (dict(algo="adam"), "algo"),
    ],
)
def test_invalid_params_are_rejected(raw, match):
    with pytest.raises(pydantic.ValidationError, match=match):
        ADAPTER.validate_python(raw)


def test_defaults_and_coercions():
    p = params(algo="bcgd")
    assert (p.d_in, p.d_out, p.m, p.L, p.init, p.order, p.lr_rule, p.dtype) == (
        128,
        10,
        600,
        1,
        "orth_identity",
        "desc",
        "opt",
        "float64",
    )
    assert p.layer_widths() == [128, 10]
    assert params(algo="bcgd", L=3).layer_widths() == [128, 128, 128, 10]
    assert params(algo="gd", lr="1e-5").lr == 1e-5  # YAML 1e-5 reaches pydantic as a string
    real = params(algo="bcgd", data="mnist")
    assert (real.d_in, real.d_out, real.m) == (784, 10, 60000)
    assert ADAPTER.validate_python(real.model_dump(mode="json")) == real


@pytest.mark.parametrize(
    "raw",
    [
        dict(algo="bcgd", order="asc"),
        dict(algo="bcgd", loss="l4"),
        dict(algo="gd", lr=0.02),
        dict(algo="bcsgd"),
        dict(algo="bcgd", lr_rule="thm32", eta_bar=1.0, check_thm32=True),
    ],
)
def test_float32_runs(raw):
    res = TASK.run(params(**raw, d_in=10, d_out=3, m=40, L=3, n_iters=30, dtype="float32"), RunContext())
    res.validate(TASK)
    assert res.status == "ok" and res.curve["err"][-1] < res.curve["err"][0]
