"""Theory of paper 003: the expressions as spec §1.6 writes them, the Thm 3.1 rate bound along a run
that meets the theorem's conditions, Lemma A.1's bounds, and the qualitative claims of Fig. 1."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import TypeAdapter

from tasks.base import Result, RunContext
from tasks.linear_resnet import theory as T
from tasks.linear_resnet.task import LinearResNetTask

TASK = LinearResNetTask()
ADAPTER = TypeAdapter(TASK.Params)
E = math.e


def run(**cfg: object) -> Result:
    result = TASK.run(ADAPTER.validate_python(cfg), RunContext())
    result.validate(TASK)
    return result


def test_expressions_as_the_spec_writes_them() -> None:
    la, lb, nx, loss0, depth = 2.0, 3.0, 5.0, 100.0, 4
    # Proof of Thm 3.1: eta = 1 / (2 L lA lB ||X|| (sqrt(e L0) + 0.5 e lA lB ||X||)).
    assert T.gd_step_proof(depth, la, lb, nx, loss0) == pytest.approx(
        1 / (2 * 4 * 2 * 3 * 5 * (math.sqrt(E * 100) + 0.5 * E * 2 * 3 * 5)), rel=1e-14
    )
    # Thm 3.1: eta <= C1 / (L lA lB ||X|| (sqrt(L0) + lA lB ||X||)), C1 = 1/(2e).
    assert T.gd_step_bound(depth, la, lb, nx, loss0) == pytest.approx(1 / (2 * E) / (4 * 30 * (10 + 30)), rel=1e-14)
    # Rate: 1 - eta L mu_A^2 mu_B^2 sigma_r^2 / e.
    assert T.contraction(1e-3, 4, 0.5, 1.5, 2.0) == pytest.approx(1 - 1e-3 * 4 * 0.25 * 2.25 * 4 / E, rel=1e-14)
    # Condition (4.1) margin and its proof constant C = 4 sqrt(2 e^3) ~ 25.35.
    assert pytest.approx(25.35, abs=0.01) == T.C_PROOF
    assert T.margin(0.5, 1.5, 2.0, 3.0, 5.0, 2.0, 100.0, 19.0) == pytest.approx(
        (0.25 * 2.25 / 6) / (5 * 9 / 4), rel=1e-14
    )
    # Remark 3.2 (A = B = I, X X^T = I): the condition reads L0 - L* <= C^-2.
    for gap in (0.5 / T.C_PROOF**2, 2.0 / T.C_PROOF**2):
        holds = T.margin(1, 1, 1, 1, 1, 1, 7.0 + gap, 7.0) >= T.C_PROOF
        assert holds == (gap <= T.C_PROOF**-2)
    # Sec. 4: modified identity needs alpha >= C ||X|| (||Y||^2/2 - L*)^{1/2} / sigma_r^2.
    assert T.alpha_min_modified_identity(5.0, 2.0, 250.0, 25.0) == pytest.approx(T.C_PROOF * 5 * 10 / 4, rel=1e-14)
    # Thm 3.8: eta <= C1 B^2 mu^2 mu^2 sigma_r^2 / (L n^2 lA^4 lB^4 ||X||^4 log(T/delta)), C1 = log 2/(96 e^3).
    want = math.log(2) / (96 * E**3) * 10**2 * 0.25 * 2.25 * 4 / (4 * 100**2 * 16 * 81 * 625 * math.log(500 / 0.1))
    assert T.sgd_step_thm38(10, 100, 4, 0.5, 1.5, 2.0, 3.0, 5.0, 2.0, 500, delta=0.1) == pytest.approx(want, rel=1e-14)
    # Normalised step (spec gotcha 2) and Lemma A.1's bounds.
    assert T.normalized_step(0.5, 4, 2.0, 3.0, 5.0) == pytest.approx(0.5 / (4 * 4 * 9 * 25), rel=1e-14)
    assert T.pl_lower(0.5, 1.5, 2.0) == pytest.approx(2 / E * 0.25 * 2.25 * 4, rel=1e-14)
    assert T.grad_upper(2.0, 3.0, 5.0) == pytest.approx(2 * E * 4 * 9 * 25, rel=1e-14)


def test_summary_holds_the_config_s_theory() -> None:
    s = run(m=30, depth=4, n=200, kappa=9.0, c=0.3, n_iters=5).summary
    assert s["kappa_x"] == pytest.approx(9.0, rel=1e-9)  # the prescribed spectrum is exact
    assert s["eta_used"] == pytest.approx(0.3 / (4 * s["lam_a"] ** 2 * s["lam_b"] ** 2 * s["norm_x"] ** 2), rel=1e-12)
    assert s["c_used"] == pytest.approx(0.3, rel=1e-12)
    assert s["rate_theory"] == pytest.approx(
        1 - s["eta_used"] * 4 * s["mu_a"] ** 2 * s["mu_b"] ** 2 * s["sigma_r"] ** 2 / E, rel=1e-12
    )
    assert s["eta_theory"] == pytest.approx(T.gd_step_proof(4, s["lam_a"], s["lam_b"], s["norm_x"], s["loss_0"]))
    assert s["theorem"] == "3.1" and s["margin_required"] == pytest.approx(T.C_PROOF)
    mod = run(transform="modified_identity", alpha=3.0, m=25, depth=2, n_iters=1).summary
    assert (mod["lam_a"], mod["mu_a"]) == pytest.approx((1.0, 1.0))
    assert (mod["lam_b"], mod["mu_b"]) == pytest.approx((3.0, 3.0))
    assert mod["loss_0"] == pytest.approx(mod["y_sq_half"], rel=1e-12)  # B A = 0: the output starts at 0
    ident = run(transform="identity", m=40, depth=2, n_iters=1).summary
    assert ident["lam_b"] == pytest.approx(2.0) and ident["mu_b"] == pytest.approx(2.0)  # sqrt(m/k)


def test_theorem_3_1_rate_holds_when_its_conditions_do() -> None:
    """Spec §4.2: modified identity with alpha = 1.01 alpha_min and the proof's step size. The
    suboptimality stays under (1 - eta L mu^2 mu^2 sigma_r^2 / e)^t at every step, the iterates stay
    in L max ||W_l||_F <= 0.5, Lemma A.1's bounds hold, and the decrement is the spec's ~0.093."""
    alpha_min = run(transform="modified_identity", m=20, n_iters=1).summary["alpha_min_theory"]
    assert alpha_min == pytest.approx(73.96, rel=0.1)  # spec: 73.96 for its data draw
    curves = {}
    for depth in (10, 50):
        res = run(
            transform="modified_identity",
            m=20,
            depth=depth,
            alpha=1.01 * alpha_min,
            step_rule="theory",
            n_iters=40,
            log_every=1,
        )
        s, c = res.summary, res.curve
        assert s["condition_holds"] and s["margin"] == pytest.approx(1.01 * T.C_PROOF, rel=1e-9)
        assert s["eta_used"] == s["eta_theory"]
        assert 1 - s["rate_theory"] == pytest.approx(0.093, rel=0.15)
        steps, rel = np.array(c["step"]), np.array(c["rel_subopt"])
        assert np.all(rel <= s["rate_theory"] ** steps * (1 + 1e-9))
        assert rel[33] < 1e-8  # spec: 7e-10 after 33 steps
        assert max(c["w_dist"]) <= 0.5
        live = rel > 1e-12  # away from the float floor
        pl, gn, sub = np.array(c["pl_ratio"]), np.array(c["grad_norm"]), np.array(c["subopt"])
        assert np.all(pl[live] >= s["pl_lower_bound"])
        assert np.all(gn[live] ** 2 <= depth * s["grad_upper_bound"] * sub[live])
        curves[depth] = rel
    # The rate depends on eta L only: L = 10 and L = 50 give the same curve.
    assert np.allclose(curves[10][:30], curves[50][:30], rtol=1e-2)


def test_modified_identity_reaches_lstar_while_identity_stays_stuck() -> None:
    """Fig. 1(a) at one c and horizon: identity stays near ||Y||^2 / 2, modified identity reaches L*."""
    cfg = {"m": 40, "depth": 10, "c": 0.2, "n_iters": 1000, "log_every": 50}
    ident = run(transform="identity", **cfg).summary
    modid = run(transform="modified_identity", **cfg).summary
    assert modid["rel_subopt_final"] < 1e-12
    assert modid["loss_final"] == pytest.approx(modid["loss_star"], rel=1e-10)
    assert 0.95 * ident["y_sq_half"] < ident["loss_final"] < 1.25 * ident["y_sq_half"]
    assert ident["loss_final"] > 50 * ident["loss_star"]
    # Only the max(d, k) = 10 first coordinates move under identity, d + k = 20 under modified identity.
    assert ident["active_width"] == 10 and modid["active_width"] == 20
    # Extra width is inert for modified identity (spec gotcha 5).
    wide = run(transform="modified_identity", **{**cfg, "m": 80, "n_iters": 200})
    narrow = run(transform="modified_identity", **{**cfg, "n_iters": 200})
    assert np.allclose(wide.curve["loss"], narrow.curve["loss"], rtol=1e-12)


def test_resnet_iterations_do_not_grow_with_depth_but_the_standard_net_s_do() -> None:
    """Fig. 1(c)-(d) / spec §4.1 at m = 200 with eta ~ 1/L (c = 0.5)."""
    its = {}
    for model in ("resnet", "standard"):
        for depth in (2, 20):
            s = run(model=model, m=200, depth=depth, c=0.5, n_iters=800, stop_rel=1e-7, log_every=50).summary
            assert s["iters_rel_1e6"] > 0
            its[model, depth] = s["iters_rel_1e6"]
    assert abs(its["resnet", 20] - its["resnet", 2]) <= 0.1 * its["resnet", 2]
    assert its["standard", 20] > 1.3 * its["standard", 2]
    assert its["standard", 20] > 1.5 * its["resnet", 20]


def test_iterations_grow_with_kappa() -> None:
    """Cor. 3.4: T = O(kappa log 1/eps). 16x kappa costs 4-16x the iterations (spec §4.3: slope 0.85-0.93)."""
    its = [
        run(kappa=kappa, m=60, depth=5, c=0.5, n_iters=3000, stop_rel=1e-7).summary["iters_rel_1e6"]
        for kappa in (1.0, 16.0)
    ]
    assert its[0] > 0 and 4 * its[0] <= its[1] <= 16 * its[0]
