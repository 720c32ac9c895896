"""l2o_gd: the cheap theory checks of spec section 4 (C3, C4, C6, C7, C12, Eq. 53), the baselines' constants,
and the params' validation."""

from __future__ import annotations

import json
import math

import numpy as np
import pydantic
import pytest
import torch

from tasks.base import RunContext
from tasks.l2o_gd import theory as TH
from tasks.l2o_gd.diagnostics import a3_norm, spectrum
from tasks.l2o_gd.model import init_weights, last_hidden
from tasks.l2o_gd.problem import make_problem
from tasks.l2o_gd.task import L2OGDTask
from tasks.l2o_gd.unroll import unroll

F64 = torch.float64
TASK = L2OGDTask()
ADAPTER = pydantic.TypeAdapter(TASK.Params)


def test_eq53_closed_form_of_sum_lambda() -> None:
    for beta, u, T in [(119.4, 83.8, 100), (3.0, 1.0, 7), (1815.5, 900.0, 1)]:
        assert TH.sum_lambda_closed(beta, u, T) == pytest.approx(float(TH.lambdas(beta, u, T).sum()), rel=1e-12)


def test_delta4_in_log_space_is_finite_and_exact() -> None:
    for c in [0.0, 0.3, -2.0, 30.0]:
        exact = -c - 2 * math.log1p(math.exp(-c))  # s(1-s) = e^{-c} / (1 + e^{-c})^2, no cancellation
        assert TH.log_sigmoid_prime(c) == pytest.approx(exact, rel=1e-12)
    assert TH.log_sigmoid_prime(1e8) == pytest.approx(-1e8, rel=1e-12)  # float64 sigmoid' would be 0


def test_lemma_a3_is_false_the_norm_is_at_least_one_and_exceeds_it() -> None:
    """C4: d > b gives M^T M a null space, where I - diag(P) M^T M / beta is the identity: norm >= 1; the
    matrix is not symmetric and random P in (0, 2) push the norm above 1 (spec: 1.3805 max at 32/20)."""
    prob = make_problem(1, 32, 20, "gauss", 0)
    g = torch.Generator().manual_seed(0)
    norms = [a3_norm(2 * torch.rand(1, 32, generator=g, dtype=F64), prob.m, prob.beta) for _ in range(50)]
    assert min(norms) >= 1.0 - 1e-12
    assert max(norms) > 1.05


def test_alpha0_scales_exactly_as_e_to_the_depth_minus_one_and_x0_ignores_e() -> None:
    """C7: with W_L = 0 the trajectory does not depend on e, and ReLU without bias is positively
    homogeneous: G_{L-1,T}(e) = e^{L-1} G_{L-1,T}(1) (Eq. 60's e^{TL-1} is wrong for this init)."""
    prob = make_problem(2, 8, 5, "gauss", 0)
    out: dict[float, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
    for e in (1.0, 10.0):
        ws = init_weights([2, 6, 9, 1], e, 0, F64, "cpu")
        u = unroll(ws, prob.m, prob.y, prob.beta, 12, keep=True)
        assert u.hidden_last is not None
        out[e] = (u.f_inst, u.hidden_last, last_hidden(ws, u.features[-1]))
    assert torch.equal(out[1.0][0], out[10.0][0])
    assert torch.allclose(out[10.0][1], 100.0 * out[1.0][1], rtol=1e-12, atol=0)
    assert spectrum(out[10.0][1]).sigma_max == pytest.approx(100 * spectrum(out[1.0][1]).sigma_max, rel=1e-12)


def test_delta7_is_zero_for_the_instance_attaining_beta_only() -> None:
    """C9 on an explicit matrix: sigma_min(sum_{t<T} (I - H/beta)^{T-t}) for one instance's H = M^T M."""
    prob = make_problem(2, 6, 4, "gauss", 3)
    T = 9
    for i in range(2):
        h = prob.m[i].T @ prob.m[i]
        a = torch.eye(6, dtype=F64) - h / prob.beta
        total = sum(torch.linalg.matrix_power(a, T - t) for t in range(1, T))
        direct = float(torch.linalg.svdvals(total).min())
        via = TH.delta7(torch.linalg.svdvals(prob.m[i : i + 1]).numpy(), prob.beta, T)
        # the null space (mu = 1) contributes T - 1; the delta7 helper sees only the b nonzero modes
        assert via == pytest.approx(min(direct, T - 1.0), abs=1e-9)
        attains = float(torch.linalg.svdvals(prob.m[i])[0] ** 2) == prob.beta
        assert (direct < 1e-9) == attains


def test_alpha0_is_numerically_zero_at_width_nd() -> None:
    """C6 / G8: with no biases and 2-D inputs, G_{L-1,T} is rank deficient even at n_{L-1} = N*d."""
    prob = make_problem(4, 16, 10, "gauss", 0)
    ws = init_weights([2, 16, 64, 1], 100.0, 0, F64, "cpu")
    hidden = unroll(ws, prob.m, prob.y, prob.beta, 30, keep=True).hidden_last
    assert hidden is not None
    s = spectrum(hidden)
    assert s.rank < 64 and s.alpha_gram < 1e-12 * s.sigma_max


def test_run_summary_carries_the_section4_checks() -> None:
    p = ADAPTER.validate_python(
        {
            "d": 16,
            "b": 10,
            "n_problems": 4,
            "n1": 16,
            "n2": 64,
            "T": 30,
            "e": 100.0,
            "lr": 1e-6,
            "epochs": 6,
            "log_every": 3,
            "diag_every": 3,
        }
    )
    r = TASK.run(p, RunContext())
    s = r.summary
    assert r.status == "ok"
    assert s["c_opt"] == pytest.approx(2 * s["beta"] / (s["beta"] + s["beta0"]), rel=1e-15)
    assert s["imp_last_best_c"] >= -1e-12  # c = 1 is on the scanned grid: the best c is never worse than GD
    assert s["lam_bar_1"] == pytest.approx(101.0, rel=1e-12)  # ||W_1^0||_2 = e (orthonormal), C_1 = 1
    assert s["w_ratio_max"] <= 1.0  # C5: the hidden weights stay inside lam_bar (lazy regime)
    # Lemma 4.2 (C3) against a closed form: at epoch 0 the learner is GD with 1/beta, whose first iterate is
    # X_1 = M^T Y / beta, exactly half the bound (2t/beta)||M^T Y|| at t = 1, and every later GD iterate is at most
    # t/beta ||M^T Y||: the ratio's max over t is 1/2; training moves it up, never past 1 (the lemma holds)
    l42 = [v for v in r.curve["lemma42_ratio"] if not math.isnan(v)]
    assert l42[0] == pytest.approx(0.5, rel=1e-12)
    assert 0.5 <= s["lemma42_ratio_max"] <= 1.0 and s["lemma42_ratio_max"] == max(l42)
    assert s["a3_norm_max"] >= 1.0 - 1e-12  # C4
    assert s["th_log10_delta4"] < -300  # C12: delta_4 underflows float64 ...
    assert s["th_margin_13a"] < 0 and s["th_margin_13b"] < 0  # ... and (13a-b) fail by a huge margin
    assert s["th_delta7"] < 1e-12 * p.T  # C9: App. B's delta_7 is 0, its explicit e bounds are infinite
    assert s["eta_eff"] == pytest.approx(1e-6 * 100.0**4, rel=1e-12)
    assert r.curve["step"][0] == 0 and r.curve["imp_last"][0] == 0.0
    assert r.curve["rank_g"][0] >= 1
    trajs = json.loads(s["traj_checkpoints"])
    assert set(trajs) == {"0", "1", "2", "5", "6"} and len(trajs["0"]) == 31
    assert trajs["0"] == json.loads(s["traj_gd"])  # epoch 0 is GD exactly
    # C11 (Lemma 4.5) at the diagnostic epochs 0 and 3 (not 6: no step follows the last epoch): it holds,
    # tightest at t = 1 (the bound is Lambda_1-sized there) and astronomically loose at t = T, where the bound
    # has grown like (Theta_L Phi)^T
    semi = [v for v in r.curve["log10_semi_smooth"] if not math.isnan(v)]
    assert len(semi) == 2 and s["log10_semi_smooth_max"] == max(semi) < 0
    assert s["log10_semi_smooth_T_max"] < -100


def test_delta1_in_log_space_equals_the_direct_sum_of_products() -> None:
    beta, u, T, lam_bar = 7.0, 3.0, 12, [2.5, 1.5, 1.0]
    theta = math.prod(lam_bar)
    lam = TH.lambdas(beta, u, T)
    fac = [1 + (1 + beta) / 2 * theta * (2 * j - 1) / beta * u for j in range(1, T + 1)]
    direct = [sum(math.prod(fac[s:t]) * lam[s - 1] for s in range(1, t + 1)) for t in range(1, T + 1)]
    assert TH.log_delta1(beta, u, T, lam_bar) == pytest.approx([math.log(v) for v in direct], rel=1e-13)
    # and it is the delta_2 of Thm 4.7 plus its s = T term, Lambda_T
    log_d2 = TH.thm47(beta, 1.0, u, 1.0, T, lam_bar, 1.0, 1e-3)["th_log10_delta2"] * math.log(10)
    assert math.exp(log_d2) + lam[-1] == pytest.approx(direct[-1], rel=1e-12)


def test_semi_smooth_ratio_is_the_log10_of_the_worst_iterate_over_its_bound() -> None:
    beta, u, T, lam_bar = 7.0, 3.0, 4, [2.0, 2.0, 1.0]
    dx, dw = np.array([1e-3, 0.0, 2e-3, 5e-4]), [0.1, 0.0, 0.3]
    # bound_t = 1/2 delta_1^t Theta_L sum_l ||dW_l|| / lam_bar_l, Theta_L = 4, the sum = 0.1/2 + 0.3/1 = 0.35
    bound = 0.5 * np.exp(TH.log_delta1(beta, u, T, lam_bar)) * 4.0 * 0.35
    got = TH.log10_semi_smooth_ratios(dx, dw, beta, u, T, lam_bar)
    assert got[1] == -math.inf  # an iterate that did not move
    assert got[[0, 2, 3]] == pytest.approx(np.log10(dx[[0, 2, 3]] / bound[[0, 2, 3]]), rel=1e-12)
    assert (TH.log10_semi_smooth_ratios(dx, [0.0, 0.0, 0.0], beta, u, T, lam_bar) == -math.inf).all()


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"d": 8, "b": 8}, "b < d"),
        ({"depth": 2, "n1": 4, "n2": 8}, "n1 is only used"),
        ({"algo": "gd", "step_rule": "two_over", "c": 1.5}, "c is only used"),
        ({"algo": "gd", "step_rule": "given"}, "needs c"),
        ({"lr": -1.0}, "greater than 0"),
        ({"e": 0.0}, "greater than 0"),
    ],
)
def test_bad_params_are_rejected(raw: dict[str, object], needle: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=needle):
        ADAPTER.validate_python(raw)


def test_defaults_resolve_to_one_cell() -> None:
    assert ADAPTER.validate_python({"n2": 64}) == ADAPTER.validate_python({"n2": 64, "n1": 64})
    assert ADAPTER.validate_python({"algo": "gd", "c": 1.5}).step_rule == "given"
    assert ADAPTER.validate_python({"depth": 2, "n2": 8}).widths() == [2, 8, 1]


def test_float32_training_is_evaluated_in_float64_from_the_exact_weights() -> None:
    """G14: a float32 run's ratios come from a float64 pass with W^k, so epoch 0 is GD exactly, and the
    learner's float32 training tracks the float64 one closely."""
    raw = {
        "d": 16,
        "b": 10,
        "n_problems": 3,
        "n1": 8,
        "n2": 32,
        "T": 20,
        "e": 100.0,
        "lr": 1e-6,
        "epochs": 3,
        "log_every": 1,
        "best_c": False,
        "svd": False,
    }
    r32 = TASK.run(ADAPTER.validate_python({**raw, "dtype": "float32"}), RunContext())
    r64 = TASK.run(ADAPTER.validate_python(raw), RunContext())
    assert r32.curve["imp_last"][0] == 0.0 and r32.curve["imp_mean"][0] == 0.0
    assert r32.summary["imp_last"] == pytest.approx(r64.summary["imp_last"], abs=1e-3)
    assert r32.summary["imp_last"] != r64.summary["imp_last"]  # really trained in float32
