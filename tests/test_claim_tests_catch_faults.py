"""Tests of the tests (issue 43): a test that asserts a claim's outcome on a learner's runs must fail on a broken
learner. Each test here plants one fault in a learner (in process, for this test only: a flipped sign, a frozen
step, a wrong initialisation) and runs the same small grid and the same outcome assertion the claim's test makes,
showing that the assertion no longer passes. The faults are monkeypatched, so tasks/ is untouched.

The three "does not hold" outcomes of paper 001's structural checks (001.c4.lemma_a3, 001.c6.alpha0_positive,
001.c12.conditions) read statistics the learner computes in tasks/l2o_gd/ (diagnostics.a3_norm,
diagnostics.spectrum, theory.thm47), so each is broken there. The expected outcome is a failure of the paper's
statement, so the fault has to make the check say "holds" (a broken learner that makes a false lemma look true),
and it is one a plausible bug makes: a matrix on the wrong operand, a sigma_min over the wrong singular values,
the wrong sign of an infinity. A flipped sign on log delta_4 alone does not do it (tried: the (13a-d) margins stay
-inf, since alpha_0 = 0 makes log alpha_0 = -inf whatever the right-hand sides are)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from analysis.claims import evaluate
from analysis.l2o_gd.claims import CLAIMS as L2O_CLAIMS
from runner.run.grid_run import run_grid
from tests.options import opts
from tests.test_ldminv_theory_claims import LEMMA2_OUTCOMES, SMALL, THM1_OUTCOMES, _verdicts, lemma2_outcomes

L2O_SMALL = Path(__file__).resolve().parents[1] / "grids" / "l2o_gd" / "small"
HIER_SMALL = Path(__file__).resolve().parents[1] / "grids" / "hierarchical" / "small"
RESNET_SMALL = Path(__file__).resolve().parents[1] / "grids" / "linear_resnet" / "small"
DL_SMALL = Path(__file__).resolve().parents[1] / "grids" / "deep_linear" / "small"


def _l2o_verdict(root: str, claim_id: str, grid: str) -> str:
    (result,) = evaluate(root, [c for c in L2O_CLAIMS if c.id == claim_id]).results
    assert result.grid == grid, result
    return result.verdict.verdict


def _l2o_unbroken_and_broken(
    clean: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, claim_id: str, stem: str, fault: tuple[Any, str, Any]
) -> tuple[str, str]:
    """The claim's verdict on the shared clean run of small `stem`, then on a rerun of it with `fault` (module,
    name, replacement) planted."""
    unbroken = _l2o_verdict(clean, claim_id, f"small_{stem}")
    monkeypatch.setattr(*fault)
    root = str(tmp_path / "res")
    run_grid(L2O_SMALL / f"{stem}.yaml", root, opts())
    return unbroken, _l2o_verdict(root, claim_id, f"small_{stem}")


@pytest.fixture(scope="module")
def l2o_clean(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The unbroken learner on the small grids test_small_grids_end_to_end_through_the_cli runs (main and
    theory_width, about a second together), shared by the l2o tests here."""
    root = str(tmp_path_factory.mktemp("l2o_clean") / "res")
    for stem in ("main", "theory_width"):
        run_grid(L2O_SMALL / f"{stem}.yaml", root, opts())
    return root


def test_lemma2_outcomes_fail_on_a_flipped_sign(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up layer's learnable term enters with the wrong sign (X <- X (sum E^l - C_k E^L)): dL/dC_k at C = 0
    turns positive, and test_lemma2_inside_its_hypotheses's assertions fail."""
    import tasks.ldminv.spectral as spectral

    def flipped(coeffs: torch.Tensor, k: int, model: str, order: int) -> torch.Tensor:
        ones = torch.ones(order, dtype=coeffs.dtype, device=coeffs.device)
        return torch.cat([ones, -coeffs[k : k + 1]])

    monkeypatch.setattr(spectral, "layer_vector", flipped)
    root = str(tmp_path / "res")
    run_grid(SMALL / "theory_lemma2.yaml", root, opts())
    with pytest.raises(AssertionError, match="not negative"):
        lemma2_outcomes(root)
    assert _verdicts(root, "000.lemma2") != LEMMA2_OUTCOMES


def test_thm1_outcomes_fail_on_a_frozen_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gradient descent that never moves the coefficients (a zero step): the training loss stays put, neither
    window falls, and test_thm1_rule_on_the_small_twin's verdicts change."""
    import tasks.ldminv.train_minv as train_minv

    class Frozen(torch.optim.SGD):
        def step(self, closure: Any = None) -> None:  # the planted fault: no update at all
            return None

    monkeypatch.setattr(train_minv.torch.optim, "SGD", Frozen)
    root = str(tmp_path / "res")
    grid = yaml.safe_load((SMALL / "theory_thm1.yaml").read_text())
    grid["blocks"] = grid["blocks"][1:]  # the practice run alone (the cheaper half of the twin)
    run_grid(grid, root, opts())
    practice = _verdicts(root, "000.thm1")["000.thm1.practice"]
    assert practice == "does not hold" != THM1_OUTCOMES["000.thm1.practice"]  # a loss that never falls: bent


def test_l2o_alignment_holds_unbroken_and_fails_on_a_wrong_initialisation(
    l2o_clean: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W_L initialised away from 0: the first forward pass is no longer GD with 1/beta, r_T at k = 0 is not 0, and
    the HOLDS test_l2o_gd_grids asserts for 001.sec51.alignment turns into 'does not hold'."""
    import tasks.l2o_gd.member as member
    import tasks.l2o_gd.model as model

    real = model.init_weights

    def wrong(widths: list[int], e: float, seed: int, dtype: torch.dtype, device: str) -> list[torch.Tensor]:
        ws = real(widths, e, seed, dtype, device)
        ws[-1] = ws[-1] + 1e-3  # the planted fault: W_L != 0 at initialisation
        return ws

    claim = [c for c in L2O_CLAIMS if c.id == "001.sec51.alignment"]
    assert _l2o_verdict(l2o_clean, claim[0].id, "small_main") == "holds"  # the unbroken learner on the same grid
    monkeypatch.setattr(member, "init_weights", wrong)  # the name the trainer calls
    root = str(tmp_path / "res")
    run_grid(L2O_SMALL / "main.yaml", root, opts())
    (result,) = evaluate(root, claim).results
    assert result.grid == "small_main" and result.verdict.verdict == "does not hold", result.verdict
    assert "max |r_T|, max |mean_t r_t| at k = 0" in result.verdict.measured


def test_lemma_a3_does_not_hold_unbroken_and_holds_on_the_wrong_operand(
    l2o_clean: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lemma A.3's matrix built on the wrong operand, I_b - M diag(P) M^T / beta (b x b) instead of
    I_d - diag(P) M^T M / beta (d x d): M diag(P) M^T is positive definite with eigenvalues below 2 for P in (0, 2),
    so the norm drops under 1 (0.976 on the small twin, against 1.06-1.07 unbroken), the null space of M^T M
    (d > b) that makes the lemma false is gone, and the DOES NOT HOLD that test_small_grids_end_to_end_through_the_cli
    asserts for 001.c4.lemma_a3 turns into 'holds'."""
    import tasks.l2o_gd.diagnostics as diagnostics

    def wrong_operand(p: torch.Tensor, m: torch.Tensor, beta: float) -> float:
        h = torch.einsum("nbd,nd,ned->nbe", m.double(), p.double(), m.double())  # the planted fault: M diag(P) M^T
        eye = torch.eye(m.shape[1], dtype=torch.float64, device=m.device)
        return float(torch.linalg.matrix_norm(eye - h / beta, ord=2).max())

    fault = (diagnostics, "a3_norm", wrong_operand)  # the trainer calls it as D.a3_norm
    verdicts = _l2o_unbroken_and_broken(l2o_clean, tmp_path, monkeypatch, "001.c4.lemma_a3", "theory_width", fault)
    assert verdicts == ("does not hold", "holds")


def test_alpha0_does_not_hold_unbroken_and_holds_on_the_smallest_nonzero_singular_value(
    l2o_clean: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """alpha_0 taken as the smallest singular value of G_{L-1,T}^0 above the rank tolerance (the pseudo-inverse's
    sigma_min) instead of the smallest of all min(n_{L-1}, N d): a rank-deficient G (rank 0.63-0.84 of N d on the
    small twin) then reports alpha_0 / sigma_max of 6e-5 .. 5e-7 instead of 0, and the DOES NOT HOLD that
    test_small_grids_end_to_end_through_the_cli asserts for 001.c6.alpha0_positive turns into 'holds'."""
    import tasks.l2o_gd.diagnostics as diagnostics

    real = diagnostics.spectrum

    def nonzero_only(hidden_last: torch.Tensor) -> diagnostics.Spectrum:
        s = real(hidden_last)
        sv = torch.linalg.svdvals(hidden_last.double())
        tol = s.sigma_max * max(hidden_last.shape) * torch.finfo(torch.float64).eps
        thin = float(sv[sv > tol].min())  # the planted fault: the zero singular values skipped
        k, n = hidden_last.shape
        return diagnostics.Spectrum(thin if n >= k else 0.0, thin, s.sigma_max, s.rank)

    fault = (diagnostics, "spectrum", nonzero_only)  # the trainer calls it as D.spectrum
    verdicts = _l2o_unbroken_and_broken(
        l2o_clean, tmp_path, monkeypatch, "001.c6.alpha0_positive", "theory_width", fault
    )
    assert verdicts == ("does not hold", "holds")


def test_thm47_conditions_do_not_hold_unbroken_and_hold_on_a_flipped_infinity(
    l2o_clean: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Thm 4.7's log margins with log 0 taken as +inf instead of -inf (the planted fault: a flipped sign): alpha_0 = 0
    on the small twin then gives log alpha_0 = +inf, every margin of (13a-d) turns from -inf into +inf, and the
    DOES NOT HOLD that test_small_grids_end_to_end_through_the_cli asserts for 001.c12.conditions turns into
    'holds'."""
    import tasks.l2o_gd.theory as theory

    real = theory._log

    def flipped(x: float) -> float:
        return math.inf if x <= 0 else real(x)  # the planted fault: log 0 = +inf

    verdicts = _l2o_unbroken_and_broken(
        l2o_clean, tmp_path, monkeypatch, "001.c12.conditions", "main", (theory, "_log", flipped)
    )
    assert verdicts == ("does not hold", "holds")


def test_c5_sgd_locality_fails_on_a_wrong_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGD with a step 30x too large: W_2's rows no longer stay put through the correction, and the HOLDS that
    test_small_locality_and_distillation_outcomes asserts for 004.C5.local_sgd turns into 'does not hold'."""
    import tasks.hierarchical.train_wk as train_wk
    from analysis.hierarchical.claims import CLAIMS as HIER_CLAIMS

    real = torch.optim.SGD

    def wrong(params: Any, lr: float, momentum: float = 0.0) -> torch.optim.Optimizer:
        return real(params, lr=30 * lr, momentum=momentum)  # the planted fault: the wrong step

    monkeypatch.setattr(train_wk.torch.optim, "SGD", wrong)
    grid = yaml.safe_load((HIER_SMALL / "small_c5_locality.yaml").read_text())
    grid["blocks"] = grid["blocks"][1:]  # the SGD cells alone, with the state reset (what the claim reads)
    grid["blocks"][0]["product"]["opt_state"] = ["reset"]
    root = str(tmp_path / "res")
    run_grid(grid, root, opts())
    (result,) = evaluate(root, [c for c in HIER_CLAIMS if c.id == "004.C5.local_sgd"]).results
    assert result.verdict.verdict == "does not hold", result.verdict


def test_semi_smoothness_is_no_verdict_on_a_frozen_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Training whose gradient step is frozen at zero (W^{k+1} = W^k): Lemma 4.5's ratio is 0/0 at every epoch,
    so no evidence, and the HOLDS that test_small_grids_end_to_end_through_the_cli asserts for 001.c11.semi_smooth
    does not survive (the check says 'not enough data' rather than a vacuous 'holds'). Lemma 4.5's bound is so
    loose (10^-1.5 at its tightest t, 10^-115 at t = T on the small twin) that a wrong gain or step on P moves
    the weights' change with the iterates' and leaves it holding: tried, a gain of 1e4 or 1e8 on the sigmoid
    and a step 3x or 10x all still hold."""
    import tasks.l2o_gd.train as train

    real = train.torch.autograd.grad

    def frozen(outputs: Any, inputs: Any, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, ...]:
        return tuple(torch.zeros_like(g) for g in real(outputs, inputs, *args, **kwargs))  # the planted fault

    monkeypatch.setattr(train.torch.autograd, "grad", frozen)
    root = str(tmp_path / "res")
    run_grid(L2O_SMALL / "theory_width.yaml", root, opts())
    (result,) = evaluate(root, [c for c in L2O_CLAIMS if c.id == "001.c11.semi_smooth"]).results
    assert result.grid == "small_theory_width" and result.verdict.verdict != "holds", result.verdict


def test_c1_c2_outcomes_fail_when_joint_training_freezes_the_lower_layers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Joint training whose schedule freezes every layer below the newest (the planted fault: a frozen layer, so
    'joint' trains as 'layerwise' does): the HOLDS that test_small_grids_run_end_to_end asserts for
    004.C1.joint_beats_layerwise, 004.C1.layerwise_plateaus (joint gains no more than layer-wise after stage 2) and
    004.C2.bfc (the lower features corrected) turn into 'does not hold'. One seed
    and gamma of the small twin (the cheaper quarter, each protocol once)."""
    import tasks.hierarchical.schedule as schedule
    from analysis.hierarchical.claims import CLAIMS as HIER_CLAIMS

    monkeypatch.setattr(schedule, "lowest_trainable", lambda p, layer: layer)
    grid = yaml.safe_load((HIER_SMALL / "small_c1_joint_vs_layerwise.yaml").read_text())
    grid["blocks"][0]["product"]["gamma"] = [0.3]
    grid["blocks"][0]["repeat"] = 1
    root = str(tmp_path / "res")
    run_grid(grid, root, opts())
    table = {r.claim.id: r for r in evaluate(root, HIER_CLAIMS).results}
    for cid in ("004.C1.joint_beats_layerwise", "004.C1.layerwise_plateaus", "004.C2.bfc"):
        assert table[cid].grid == "small_c1_joint_vs_layerwise", table[cid]
        assert table[cid].verdict.verdict == "does not hold", (cid, table[cid].verdict)


def test_fig1d_depth_fails_when_the_resnet_loses_its_skip_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ResNet's gradient computed as the standard net's (the planted fault: the skip connections dropped from
    the backward and forward pass): its iteration count no longer stays flat in depth, and the HOLDS that
    test_registered_claims_run_on_reduced_grids asserts for 003.fig1d.depth turns into 'does not hold'."""
    import tasks.linear_resnet.train as train
    from analysis.linear_resnet.claims import CLAIMS as RESNET_CLAIMS

    for name in ("gram_excess_grad", "direct_loss_grad"):
        real = getattr(train, name)

        def no_skip(*args: Any, _real: Any = real) -> Any:
            return _real(*args[:-1], False)  # the planted fault: resnet=False whatever the model

        monkeypatch.setattr(train, name, no_skip)
    root = str(tmp_path / "res")
    grid = yaml.safe_load((RESNET_SMALL / "fig1d_depth_m200.yaml").read_text())
    grid["blocks"][0]["repeat"] = 1  # one seed of the twin's two (half its runs)
    run_grid(grid, root, opts())
    (result,) = evaluate(root, [c for c in RESNET_CLAIMS if c.id == "003.fig1d.depth"]).results
    assert result.grid == "small_fig1d_depth_m200" and result.verdict.verdict == "does not hold", result.verdict


def test_fig6_order_rule_fails_when_the_sweep_order_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BCGD that sweeps its layers in ascending order whatever `order` says (the planted fault: a broken step
    schedule): both orders train alike, and the HOLDS that test_deep_linear_claims_on_reduced_grids asserts for
    002.fig6.order_rule turns into 'does not hold'. The twin's orth-identity runs alone (what the claim reads)."""
    import tasks.deep_linear.batched as batched
    import tasks.deep_linear.bcgd as bcgd
    from analysis.deep_linear.claims import CLAIMS as DL_CLAIMS

    slots, update = bcgd.gauss_seidel_slots, bcgd.apply_update
    for module in (bcgd, batched):
        monkeypatch.setattr(module, "gauss_seidel_slots", lambda ws, order, counter: slots(ws, "asc", counter))
        monkeypatch.setattr(module, "apply_update", lambda *args: update(*args[:-2], "asc", args[-1]))
    grid = yaml.safe_load((DL_SMALL / "fig6_order_init.yaml").read_text())
    grid["blocks"][0]["product"]["init"] = ["orth_identity"]
    root = str(tmp_path / "res")
    run_grid(grid, root, opts())
    (result,) = evaluate(root, [c for c in DL_CLAIMS if c.id == "002.fig6.order_rule"]).results
    assert result.grid == "small_fig6_order_init" and result.verdict.verdict == "does not hold", result.verdict


def test_lemma1_exactness_fails_on_a_wrong_coefficient(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed D-Minv whose hyper-power polynomial carries a constant term 1 + 1e-3 instead of 1 (the planted
    fault: a wrong coefficient): ||AA+ - AX_k||_2 no longer equals e0^(L^k), and the HOLDS that
    test_small_grid_runs_reports_and_checks asserts for 000.lemma1.exact turns into 'does not hold'."""
    import tasks.ldminv.matrix_path as matrix_path

    real = matrix_path.hyperpower_matrix

    def wrong(e: torch.Tensor, order: int) -> torch.Tensor:
        return real(e, order) + 1e-3 * torch.eye(e.shape[-1], dtype=e.dtype, device=e.device)

    monkeypatch.setattr(matrix_path, "hyperpower_matrix", wrong)
    root = str(tmp_path / "res")
    run_grid(SMALL / "theory_lemma1.yaml", root, opts())
    assert _verdicts(root, "000.lemma1") == {"000.lemma1.exact": "does not hold"}
