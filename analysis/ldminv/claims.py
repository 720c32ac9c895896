"""Claims of paper 000 (LD-Minv and D-SVD), spec sections 3 and 4, decided on the ldminv grids by
the verdicts of analysis/ldminv/verdicts.py and the theory checks of theory_checks.py.

Known non-reproductions (spec section 7) expect "does not hold" and say why: the paper's absolute
Fig. 1 values, its small-kappa D-Minv row of Table 2 (contradicts Lemma 1), its slow untrained D-SVD
decay, and the 1e-8 floor (float32) that float64 runs do not have.
"""

from __future__ import annotations

from analysis.claims import FAILS, UNDECIDED, Claim, RuleChange, on_drawn_problems
from analysis.ldminv.lemma2 import gradient_flat_at_one, gradient_sign_scan, one_not_a_minimum, order_on_trained_layers
from analysis.ldminv.theory_checks import (
    LEMMA2_REGIME,
    THM1_PRACTICE,
    THM1_REGIME,
    cost_l_over_ln_l,
    float32_rank_deficient_bounded,
    lemma1_exact,
    lemma2_c_to_one,
    lemma2_gradient,
    prop1_invariance,
    prop1_rounding_growth,
    prop4_floor,
    thm1_linear,
    thm1_practice,
    thm2_double_descent,
    thm2_gap_n,
)
from analysis.ldminv.verdicts import (
    dsvd_literal_uphill,
    dsvd_paper_init_row,
    dsvd_training_helps,
    dsvd_untrained_decreases,
    fig1_values,
    floor_near_1e8,
    frobenius_slope,
    k_matters_more,
    ld_beats_d_across_l,
    ld_beats_d_moderate_k,
    paper_sgd_barely_moves,
    table2_easy_data_dminv_better,
    table2_large_kappa_values,
    table2_ld_flat,
    table2_ld_wins,
    table2_ld_wins_off_floor,
    table2_small_kappa_d_row,
)

TASK = "ldminv"
PAPER = "000"

FIG1 = "the paper's Fig. 1 setting: 100x100 Gaussian (std 1/sqrt d), c0 = ||A||_2^2, 2000-matrix pool, 1200 iterations"
TABLE2 = "the paper's Table 2 setting: 100x100 U S V, K = 4, L = 10, online batches of 100, 1200 iterations"
TABLE3 = "the paper's Table 3 setting: 50x100 Gaussian M, inner LD-Minv K = 6, L = 4, box step rule"
SPEC_TABLE2_LD = (
    "spec 7.3, Adam 1e-3, c0 fro, D -> LD: kappa 2 29.9 -> 12.2, 5 9.81 -> 14.2, 10 4.32 -> 7.90, 1000 2.56 -> 3.25"
)


ISSUE43 = "2026-11-29"
THM1_OLD = (
    "the second and the last quarter of the run's training: straight when the last quarter decays at least half as "
    "fast as the second (per step)"
)
THM2_NOISE = RuleChange(
    ISSUE43,
    "the measured gaps as they are, whatever the test set's noise",
    "does not hold",
    "the gaps (1e-5 to 1e-3 of an O(1) loss) sit at the 1000-matrix test set's sampling noise: a gap counts now only "
    "when it exceeds twice the standard error of the test loss (computed from the run's test set and coefficients); "
    "without enough resolved gaps the claim is undecided",
)


def _g(stem: str) -> tuple[str, ...]:
    return (stem, f"small_{stem}")


CLAIMS = [
    Claim(
        "000.fig1a.depth_over_order",
        PAPER,
        TASK,
        _g("fig1_kl"),
        "at similar cost, depth K helps more than order L: (K,L) = (7,4) beats (2,9)",
        k_matters_more,
        regime=FIG1,
        spec="spec 7.2, Adam 1e-3: (7,4) -5.21 vs (2,9) -1.33",
        paper_says="(7,4) -1.0 vs (2,9) +0.32: depth matters more than order ('large K, small L')",
    ),
    Claim(
        "000.fig1a.values",
        PAPER,
        TASK,
        _g("fig1_kl"),
        "LD-Minv log10 test loss at (7,4), (7,9), (2,9) within 1 of the paper's -1.0, -4.6, +0.32",
        fig1_values,
        expected=FAILS,
        why_expected="no reading of the text reproduces all three (spec 7.2): ours are 1-4 log10 lower with "
        "std 1/sqrt(d), c0 = ||A||_2^2",
        regime=FIG1,
        spec="spec 7.2, D-Minv -> SGD 1e-4 / Adam 1e-3: (7,4) -4.43 -> -4.44 / -5.21, (7,9) -7.77 -> -7.77 / -8.48, "
        "(2,9) -0.99 -> -1.00 / -1.33",
        paper_says="log10 TestLoss (7,4) -1.0, (7,9) -4.6, (2,9) +0.32",
    ),
    Claim(
        "000.fig1b.ld_beats_d",
        PAPER,
        TASK,
        _g("fig1_k"),
        "trained LD-Minv beats D-Minv for moderate K (Adam)",
        ld_beats_d_moderate_k,
        regime=FIG1 + "; L = 4, K in 2..10, Adam 1e-3 (the paper's SGD barely moves C: 000.fig1b.paper_sgd)",
        spec="spec 7.2, (7,4): D-Minv -4.43, Adam 1e-3 -5.21",
        paper_says="Fig. 1(b): LD-Minv better than D-Minv for moderate K (L = 4)",
    ),
    Claim(
        "000.fig1c.ld_beats_d",
        PAPER,
        TASK,
        _g("fig1_l"),
        "trained LD-Minv beats D-Minv at every L (K = 5, Adam)",
        ld_beats_d_across_l,
        regime=FIG1 + "; K = 5, L in 4..12, Adam 1e-3",
        spec="spec 7.2, (7,9): D-Minv -7.77, Adam 1e-3 -8.48",
        paper_says="Fig. 1(c): LD-Minv below D-Minv at every L (K = 5)",
    ),
    Claim(
        "000.fig1b.paper_sgd",
        PAPER,
        TASK,
        _g("fig1_k"),
        "the paper's optimiser (SGD 1e-4, 1200 iterations) gains about 1 log10 over D-Minv",
        paper_sgd_barely_moves,
        expected=FAILS,
        why_expected="spec 6.5: with the mean-normalised loss, SGD 1e-4 moves C by < 1e-2 and gains < 0.1 log10",
        regime=FIG1 + "; SGD 1e-4, lr halved every 300 iterations (the paper's)",
        spec="spec 6.5: SGD 1e-4 gains 0.1-0.6 log10 at most in the Fig. 1 setting (2.56 -> 2.57 in Table 2's)",
        paper_says="SGD lr 1e-4 (halved every 300), 1200 iterations: learning gains about 1 log10 over D-Minv",
    ),
    Claim(
        "000.fig1b.floor_1e8",
        PAPER,
        TASK,
        _g("fig1_k"),
        "for K > 15 D-Minv's loss is of order 1e-8",
        floor_near_1e8,
        expected=FAILS,
        why_expected="1e-8 is the float32 floor (spec 3.1); float64 goes down to about 1e-28",
        regime=FIG1 + "; float64 (spectral) and float32 (matrix path) at K > 15",
        spec="spec 3.1: float32 matrix path -8.2 at K = 20, L = 4",
        paper_says="for K > 15 D-Minv's error is of order 1e-8 and LD = D",
    ),
    Claim(
        "000.thm.frob_slope",
        PAPER,
        TASK,
        ("fig1_kl", "fig1_k", "small_fig1_kl", "small_fig1_k"),
        "log10 D-Minv loss falls by 1.5 log10 L per layer on square Gaussian data",
        frobenius_slope,
        regime="inside spec 4.1b's derivation: square Gaussian A (flat singular-value density near 0), K from 2 "
        "until sigma_min converges, far above the float64 floor",
        spec="spec 4.1b: -0.89 (L = 4) and -1.41 (L = 9) against the predicted -0.90, -1.43",
        paper_says="- (derived from Lemma 1 by the spec, 4.1b)",
    ),
    Claim(
        "000.table2.ld_wins",
        PAPER,
        TASK,
        _g("table2_kappa"),
        "LD-Minv beats D-Minv for every kappa >= 2 (the paper's statement; c0 = ||A||_F^2, Adam)",
        table2_ld_wins,
        expected=FAILS,
        why_expected="Lemma 1 makes D-Minv exact to float64 rounding at kappa 2 and 3 (e0^(10^4)): there learned "
        "C != 1 only adds Prop. 4's floor (about 2|1 - C|), so LD-Minv is worse; it wins from kappa 4 on "
        "(000.table2.ld_wins_kappa_ge_4)",
        regime=TABLE2 + "; c0 = ||A||_F^2, Adam 1e-3 (the paper's SGD 1e-4 moves nothing)",
        spec=SPEC_TABLE2_LD,
        paper_says="LD-Minv beats D-Minv for kappa >= 2: 5.01 vs 2.83 at kappa 2 ... 3.21 vs 2.25 at 1000",
    ),
    Claim(
        "000.table2.ld_wins_kappa_ge_4",
        PAPER,
        TASK,
        _g("table2_kappa"),
        "narrowed from the paper's kappa >= 2 after the results, at the first kappa where LD-Minv wins: LD-Minv "
        "beats D-Minv for every kappa >= 4 (c0 = ||A||_F^2, Adam)",
        table2_ld_wins_off_floor,
        post_hoc=True,
        history=(
            RuleChange(
                ISSUE43,
                "the narrowed claim kappa >= 4, 'where D-Minv is above its float64 floor', counted in the tallies",
                "holds",
                "the cut-off is the first kappa where LD-Minv wins, chosen after the results, and its stated reason is "
                "false: at kappa = 3 D-Minv is at 4e-21, ten orders above kappa = 2, not at its floor. The paper's "
                "claim (000.table2.ld_wins) stands; this narrowed one is post hoc, outside the tallies",
            ),
        ),
        regime=TABLE2 + "; c0 = ||A||_F^2, Adam 1e-3",
        spec=SPEC_TABLE2_LD,
        paper_says="LD-Minv beats D-Minv for kappa >= 2 (narrowed here to kappa >= 4): 3.62 vs 2.36 at kappa 4 ... "
        "3.21 vs 2.25 at 1000",
    ),
    Claim(
        "000.table2.ld_flat",
        PAPER,
        TASK,
        _g("table2_kappa"),
        "LD-Minv is flat in kappa for kappa >= 10 (within 0.5 log10)",
        table2_ld_flat,
        expected=FAILS,
        why_expected="flat only for kappa >= 50: at kappa = 10 the problem is easier than the paper's numbers say "
        "(our D-Minv 4.3 vs the paper's 2.27, the same Lemma 1 contradiction as the small-kappa row), and LD-Minv "
        "improves on it to about 7.9",
        regime=TABLE2 + "; c0 = ||A||_F^2, Adam 1e-3",
        spec=SPEC_TABLE2_LD,
        paper_says="LD-Minv about flat in kappa: 3.30, 3.21, 3.22, 3.21 for kappa 10, 50, 100, 1000",
    ),
    Claim(
        "000.table2.large_kappa_values",
        PAPER,
        TASK,
        _g("table2_kappa"),
        "Table 2 values at kappa >= 50 within 0.5 log10 of the paper (c0 = ||A||_F^2, Adam)",
        table2_large_kappa_values,
        regime=TABLE2 + "; c0 = ||A||_F^2, Adam 1e-3",
        spec="spec 7.3: D-Minv 2.57 / 2.52 / 2.53 at kappa 50 / 100 / 1000 (0.27-0.31 above the paper's 2.26-2.25); "
        "LD 3.25 at kappa 1000",
        paper_says="-log10 TestLoss at kappa 50, 100, 1000: D-Minv 2.26, 2.26, 2.25; LD-Minv 3.21, 3.22, 3.21",
    ),
    Claim(
        "000.table2.small_kappa_dminv",
        PAPER,
        TASK,
        _g("table2_kappa"),
        "the paper's D-Minv row at kappa <= 5 (7.64 .. 2.30)",
        table2_small_kappa_d_row,
        expected=FAILS,
        why_expected="contradicts Lemma 1: with sigma in [1/kappa, 1] and L^K = 1e4 D-Minv is far more accurate",
        regime=TABLE2 + "; c0 = ||A||_F^2",
        spec="spec 7.3, c0 fro: exact, 29.9, 20.1, 13.5, 9.70 at kappa 1..5",
        paper_says="D-Minv 7.64, 2.83, 2.49, 2.36, 2.30 at kappa 1..5",
    ),
    Claim(
        "000.table2.easy_data",
        PAPER,
        TASK,
        _g("table2_kappa"),
        "on easy data (kappa <= 2) D-Minv is at least as good as LD-Minv and strictly better somewhere",
        table2_easy_data_dminv_better,
        regime=TABLE2 + "; c0 = ||A||_F^2, Adam 1e-3",
        spec="spec 7.3: kappa 2, D 29.9 -> LD 12.2 (Adam 1e-3)",
        paper_says="D-Minv better at kappa = 1 (7.64 vs 5.95)",
    ),
    Claim(
        "000.table3.init_decreases",
        PAPER,
        TASK,
        _g("table3_dsvd"),
        "untrained D-SVD test loss falls with K_svd",
        dsvd_untrained_decreases,
        regime=TABLE3 + ", untrained",
        spec="spec 3.4 [OURS]: 16.55, 2.82, 2.08, 1.28, 0.87, 0.64, 0.40 at K_svd 1..60",
        paper_says="untrained loss falls with K_svd (44.998 -> 5.015)",
    ),
    Claim(
        "000.table3.init_values",
        PAPER,
        TASK,
        _g("table3_dsvd"),
        "untrained D-SVD test loss within 2x of the paper's Init row",
        dsvd_paper_init_row,
        expected=FAILS,
        why_expected="spec 7.5: the box-rule Cayley solver decays much faster than the paper's Init row",
        regime=TABLE3 + ", untrained",
        spec="spec 3.4 [OURS]: 16.55, 2.82, 2.08, 1.28, 0.87, 0.64, 0.40 at K_svd 1..60",
        paper_says="Init Test Loss 44.998, 35.900, 26.661, 15.613, 10.356, 7.706, 5.015 at K_svd 1..60",
    ),
    Claim(
        "000.table3.literal_rule_uphill",
        PAPER,
        TASK,
        _g("table3_dsvd"),
        "the literal step rule min{eps, -f'/f''} takes uphill steps and ends worse than the box rule",
        dsvd_literal_uphill,
        regime=TABLE3 + ", untrained, literal against box step rule",
        spec="spec 7.5: literal 87.4 (K_svd 1) .. 87.0 (60), uphill in 50% of first-layer updates",
        paper_says="Eq. 12's step min{2/||P||, -f'/f''} (Eq. 8, the line search it stands for, is lost)",
    ),
    Claim(
        "000.table3.training_helps",
        PAPER,
        TASK,
        ("table3_dsvd_paper", "table3_dsvd", "small_table3_dsvd_paper", "small_table3_dsvd"),
        "trained D-SVD beats untrained by 10x for K_svd >= 5",
        dsvd_training_helps,
        expected=UNDECIDED,
        why_expected="at the budget run here (20-100 outer iterations, T_inv <= 2, batch 10) the verdict is 'undecided "
        "at this budget'; the paper's 200 / 100 / 30 (table3_dsvd_paper.yaml) costs ~55 h of this CPU at K_svd = 5 "
        "alone, a GPU job that no session here was lent",
        regime=TABLE3 + ", Algorithm 3 training of the step offsets (SGD 1e-2 or Adam 1e-2)",
        spec="spec 7.5: not run (too expensive on a 2-core CPU)",
        paper_says="Final Test Loss 23.18, 0.9565, 0.4043, 0.2694, 0.2018, 0.1243, 0.0305 against Init 45.00 .. "
        "5.015 (35.9 -> 0.96 at K_svd = 5)",
    ),
    Claim(
        "000.lemma1.exact",
        PAPER,
        TASK,
        _g("theory_lemma1"),
        "||AA+ - AX_k||_2 = e0^(L^k) on square, rectangular and rank-deficient A",
        lemma1_exact,
        regime="inside Lemma 1: c0 > ||A||_2^2 / 2 (spec2 x1, x0.6, fro), float64, any shape and rank",
        spec="spec 4.1: verified on a 60x90 rank-30 matrix with c0 in {||A||^2, 0.6 ||A||^2, ||A||_F^2}",
        paper_says="Lemma 1: ||AA+ - AX_k|| = e0^(L^k)",
    ),
    Claim(
        "000.prop1.invariant",
        PAPER,
        TASK,
        _g("theory_lemma1"),
        "X_k A A+ = X_k = A+ A X_k at machine precision in float64 (K = 8)",
        prop1_invariance(1e-10),
        regime="inside Prop. 1 up to rounding: float64, K = 8",
        spec="spec 4.2: 2e-15 -> 4e-13 over 6 layers at L = 4",
        paper_says="Prop. 1: X_k A A+ = X_k = A+ A X_k for all k",
    ),
    Claim(
        "000.prop1.float64_deep",
        PAPER,
        TASK,
        _g("theory_prop1"),
        "invariant spaces stay below 1e-6 to K = 20 in float64 on rank-deficient A",
        prop1_invariance(1e-6),
        expected=FAILS,
        why_expected="Prop. 1 is exact arithmetic; float64 rounding in the null space grows by L = 4 per layer, "
        "4^20 x 1e-16 = 1e-4 at K = 20 (see 000.prop1.rounding_growth)",
        regime="outside Prop. 1's exact arithmetic: float64 rounding, 100x100 rank 50, K to 20",
        spec="spec 4.2: 2e-15 -> 4e-13 over 6 layers at L = 4",
        paper_says="Prop. 1: X_k A A+ = X_k = A+ A X_k for all k (exact arithmetic)",
    ),
    Claim(
        "000.prop1.rounding_growth",
        PAPER,
        TASK,
        _g("theory_prop1"),
        "in float64 the invariant-space residual grows by a factor L per layer while ||X|| stays bounded",
        prop1_rounding_growth,
        regime="float64 rounding, 100x100 rank 50, K 4..20, L = 4",
        spec="spec 6.4: float64 stays stable to K = 20",
        paper_says="Prop. 1 (exact arithmetic); rounding is not discussed",
    ),
    Claim(
        "000.prop1.float32_bounded",
        PAPER,
        TASK,
        _g("theory_prop1"),
        "||X_K|| stays bounded for rank-deficient A in float32",
        float32_rank_deficient_bounded,
        expected=FAILS,
        why_expected="spec 6.4: float32 null-space rounding is amplified by sum C = L per layer",
        regime="practice: float32 rounding, 100x100 rank 50, K 4..20, L = 4",
        spec="spec 6.4: ||X|| 5.5 at K = 12, 140 at K = 16, 3.7e4 at K = 20",
        paper_says="Prop. 1: zero singular values stay zero, so rank-deficient A work unchanged",
    ),
    Claim(
        "000.cost.l_over_ln_l",
        PAPER,
        TASK,
        _g("theory_cost"),
        "the cost K*L to reach a fixed precision grows like L/ln L, cheapest at small L",
        cost_l_over_ln_l,
        regime="fixed D-Minv (no training), 100x100 U S V at kappa 100, c0 = ||A||_2^2, L 2..12",
        spec="spec 4.3: L/ln L is smallest at L = 3; L = 2 and 4 tie",
        paper_says="for a fixed precision the total cost grows like O(L / ln L) in L",
    ),
    Claim(
        "000.lemma2.gradient",
        PAPER,
        TASK,
        _g("theory_lemma2"),
        "Lemma 2: at C = 0 the training loss decreases in every C_k (dL/dC_k < 0)",
        lemma2_gradient,
        regime=LEMMA2_REGIME,
        paper_says="Lemma 2: dL/dC_k < 0 for all C_k in [0, 1 + eps]",
    ),
    Claim(
        "000.lemma2.order",
        PAPER,
        TASK,
        _g("theory_lemma2"),
        "Lemma 2: after GD, every layer that trained (C_k, k < K, at least half way from 0 to 1) converges with "
        "an order log e_(k+1) / log e_k in (L, L+1] on the training matrix",
        order_on_trained_layers,
        expected=FAILS,
        why_expected="measured on 2026-11-29 under the rule of that date: the trained layers' orders are 8-37, "
        "not in (L, L+1]: while e_k is near 1 a layer's order is about L + C_k, and GD takes C_1 to 4-28 and C_2 to "
        "3-4.5 (000.lemma2.c_to_one)",
        regime=LEMMA2_REGIME,
        paper_says="Lemma 2: with C_k around 1 the order of convergence is L~ in (L, L+1]",
        history=(
            RuleChange(
                ISSUE43,
                "the lower median over layers 1..K-2 and the test matrix of log e_(k+1) / log e_k, in (L, L+1]",
                "holds (orders 4.02-5.13)",
                "the median picked a layer whose C_k barely moved from its start (0.002-0.23: fixed D-Minv, order "
                "L + 0.001), while the layers that trained have orders of 8-15 (and e_k changes sign on the 1x1 "
                "matrix); the lemma speaks of layers whose C_k went to about 1, on the one training matrix",
            ),
        ),
    ),
    Claim(
        "000.lemma2.sign_scan",
        PAPER,
        TASK,
        _g("theory_lemma2"),
        "Lemma 2: dL/dC_k < 0 over all of [0, 1] for every k (scans of each C_k with the others at 0, and of the "
        "diagonal C = t 1), on each run's training matrix",
        gradient_sign_scan,
        regime=LEMMA2_REGIME,
        paper_says="Lemma 2: D_[C_k] L < 0 for all C_k in [0, 1 + eps], eps > 0 depending on e_(k-1)",
    ),
    Claim(
        "000.lemma2.flat_at_one",
        PAPER,
        TASK,
        _g("theory_lemma2"),
        "Lemma 2: at C = 1 the gradient dL/dC_k (k < K) is about 0: within 1 % of its value at C = 0",
        gradient_flat_at_one,
        regime=LEMMA2_REGIME,
        paper_says="Lemma 2: D_[C_k] L ~ 0 for k in [K-1] when C_k in [1 - eps, 1 + eps]",
    ),
    Claim(
        "000.lemma2.one_not_minimum",
        PAPER,
        TASK,
        _g("theory_lemma2"),
        "Lemma 2: C = 1 is not a local minimum of the training loss (the loss falls along -grad from C = 1)",
        one_not_a_minimum,
        regime=LEMMA2_REGIME,
        paper_says="Lemma 2: C_k = 1 for all k is not a global or even local minimum for the training loss",
    ),
    Claim(
        "000.lemma2.c_to_one",
        PAPER,
        TASK,
        _g("theory_lemma2"),
        "Lemma 2: from 0, GD drives every C_k (k < K) to about 1 (within [0.5, 1.5])",
        lemma2_c_to_one,
        expected=FAILS,
        why_expected="measured inside the hypotheses: C_1 goes to 4-6 on the 20x20 matrices and about 28 on the 1x1 "
        "one, C_2 to 3-4.5 (while e_k is near 1, e_(k+1) = e_k^L (1 - C_k + C_k e_k) falls fastest for a large "
        "C_k, and on one matrix nothing stops C_1 short of the value that zeroes e_1), and the last layers stay near 0 "
        "(their gradient ~ e_k^(2L) vanishes once e_k is small); the order is raised all the same "
        "(000.lemma2.order)",
        regime=LEMMA2_REGIME,
        paper_says="Lemma 2: from 0, the C_k (k < K) converge into [1 - eps, 1 + eps] under GD with a proper step",
    ),
    Claim(
        "000.thm1.linear",
        PAPER,
        TASK,
        _g("theory_thm1"),
        "Theorem 1: full-batch GD drives the training loss down linearly (a constant factor per step: log L_n(t) "
        "a straight line from a fixed 200-step transient until L_n has fallen 10 orders)",
        thm1_linear,
        needs_curves=True,
        regime=THM1_REGIME,
        history=(
            RuleChange(
                ISSUE43,
                THM1_OLD,
                "holds (5 of 5 runs at 40,000 steps)",
                "the quarters scale with the run's length: at 40,000 steps they hid a crawl (the loss reaches 1e-10 to "
                "1e-12 by step ~1,500 and then barely moves) and the same rule at 8,000 steps called a seed 'not "
                "linear'. One rule for inside and outside now, independent of the length: a fixed transient, then the "
                "rate until the loss reaches its epsilon, with the loss levels reported beside",
            ),
        ),
        paper_says="Thm 1: L_n(C^(T)) < eps for T = Theta(d L K n b_a^-2 ln 1/eps), eta = Theta(1/(d L)), K = "
        "Omega(n d)",
    ),
    Claim(
        "000.thm1.practice",
        PAPER,
        TASK,
        _g("theory_thm1"),
        "outside Theorem 1's hypotheses (K << n d, eta = 1), full-batch GD still converges linearly (the rule of "
        "000.thm1.linear)",
        thm1_practice,
        needs_curves=True,
        expected=FAILS,
        history=(
            RuleChange(
                ISSUE43,
                THM1_OLD,
                "does not hold (13 of 18 runs straight)",
                "one rule for inside and outside Theorem 1, independent of the run's length (000.thm1.linear)",
            ),
        ),
        why_expected="with K*L coefficients against n*d singular values per layer the loss has a positive minimum "
        "(Thm 1 needs K = Omega(n d)): GD decelerates towards it instead of falling at a constant rate. Measured on "
        "2026-11-29 under the window rule: after the 200-step transient the loss is at 1e-6 to 1e-7 and falls 0.02-0.2 "
        "log10 per 1000 steps, the window's second half at under a quarter of the first's rate in 10 of 18 runs "
        "(all six at K = 8 and 16)",
        regime=THM1_PRACTICE,
        paper_says="Thm 1 (its hypotheses: K = Omega(n d), eta = Theta(1/(d L))); the abstract: O(n K L log 1/eps)",
    ),
    Claim(
        "000.thm2.gap_in_n",
        PAPER,
        TASK,
        ("theory_thm2_gap_n", "theory_thm2", "small_theory_thm2_gap_n", "small_theory_thm2"),
        "the generalisation gap falls at least like n^-1/2",
        thm2_gap_n,
        expected=UNDECIDED,
        why_expected="measured on 2026-11-27: the gaps are 1e-5..1e-3 of an O(1) loss, at the sampling noise of the "
        "1000-matrix test set (K*L shared coefficients generalise almost perfectly): no n^-1/2 trend is resolvable "
        "without a test set far larger",
        regime="practice: Adam 1e-2 from C = 1 on 20x20 Gaussian (Thm 2 assumes GD from |C - 1| = O(K^-alpha), "
        "alpha >= 1)",
        paper_says="Thm 2: gap <= O~(min{b d^3 L / K^(alpha/2), sqrt(d^3 K / n)}) + O(sqrt(ln(1/delta)/n))",
        history=(
            THM2_NOISE,
            RuleChange(
                ISSUE43,
                "the slope of the median resolved gap per n against n, <= -0.4 holds, else does not hold",
                "does not hold (slope +0.17 of the medians)",
                "the median slope carried no uncertainty: the three draws' gaps at one n differ in sign and by 10x "
                "(e.g. -0.0021, +0.0018, -0.0005 at n = 10), far more than their test noise; a rule changed after "
                "the results of 2026-11-29, recorded here: the slope over every resolved run with its standard error, "
                "holds when slope + 2 SE <= -0.4, does not hold when slope - 2 SE > -0.4",
            ),
        ),
    ),
    Claim(
        "000.thm2.gap_in_n_inside",
        PAPER,
        TASK,
        _g("theory_thm2_inside"),
        "inside Theorem 2's hypotheses, the generalisation gap falls at least like n^-1/2 (gaps resolved above the "
        "test set's noise)",
        thm2_gap_n,
        regime="inside Thm 2: full-batch GD from C = 1 + U(-1,1)/K (alpha = 1), K = 8 (K^1.5 >= sqrt n), sigma in "
        "[1/2, 1] (20x20 U S V), L = 4, 100,000 test matrices",
        paper_says="Thm 2: gap <= O~(min{b d^3 L / K^(alpha/2), sqrt(d^3 K / n)}) + O(sqrt(ln(1/delta)/n))",
        history=(
            RuleChange(
                ISSUE43,
                "the slope of the median resolved gap per n against n, <= -0.4 holds, else does not hold",
                "holds (slope -0.59 of the medians)",
                "the median slope carried no uncertainty: the three draws' gaps at one n differ in sign and by 10x "
                "(e.g. -0.0021, +0.0018, -0.0005 at n = 10), far more than their test noise; a rule changed after "
                "the results of 2026-11-29, recorded here: the slope over every resolved run with its standard error, "
                "holds when slope + 2 SE <= -0.4, does not hold when slope - 2 SE > -0.4",
            ),
        ),
    ),
    Claim(
        "000.thm2.double_descent",
        PAPER,
        TASK,
        ("theory_thm2_gap_k", "theory_thm2", "small_theory_thm2_gap_k", "small_theory_thm2"),
        "the gap first grows then falls in K (double descent of the bound)",
        thm2_double_descent,
        expected=UNDECIDED,
        why_expected="the measured gaps are at the test set's noise (000.thm2.gap_in_n): no shape in K is resolvable",
        regime="practice: Adam 1e-2 from C = 1 on 20x20 Gaussian (Thm 2 assumes GD from |C - 1| = O(K^-alpha), "
        "alpha >= 1)",
        paper_says="Thm 2's bound first grows like sqrt(K/n), then decays like K^(-alpha/2): a double descent in K",
        history=(
            THM2_NOISE,
            RuleChange(
                ISSUE43,
                "the K of the largest resolved median gap must lie strictly inside the K range (at every n)",
                "does not hold (on 34 of the 36 runs of theory_thm2_gap_k: largest gap at K = 2 for n = 10, K = 1 "
                "for n = 50)",
                "that peak's position was read off differences inside the gaps' spread across draws (K = 1 and 2: "
                "0.0011 vs 0.0011 at n = 10, 0.0011 vs 0.00089 at n = 50, while a K's three gaps range over e.g. "
                "-0.0056..+0.0083): a rule changed after those results, recorded here; the rise and the fall must now "
                "each be resolved beyond twice the combined standard error (test noise and draws), as must a fall "
                "from the first K for 'does not hold'",
            ),
        ),
    ),
    Claim(
        "000.prop4.floor",
        PAPER,
        TASK,
        _g("theory_prop4"),
        "|C - 1| = delta leaves ||e_K||_inf within the bound and of order 2 delta",
        prop4_floor,
        regime="inside Prop. 4: |C - 1| = delta fixed (no training), 100x100 U S V at kappa 10, K = 8, L = 4",
        spec="spec 4.9: the floor is about 2 delta",
        paper_says="Prop. 4: ||e_k||_inf <= e0^(L^k) + (17/8) delta",
    ),
]

# The problem is a draw of matrices (a training pool and a test set per seed, data_seed None reading the seed):
# one draw decides nothing close (issue 43), so every claim that compares trained runs is refused a verdict on
# fewer than 3 seeds. The exempt ones are no margin decided on one draw:
CLAIMS = on_drawn_problems(
    CLAIMS,
    "data_seed",
    {
        "000.lemma1.exact": "an identity of fixed D-Minv checked to rounding on every test matrix of every run",
        "000.prop1.invariant": "an identity of fixed D-Minv checked to rounding on every test matrix of every run",
        "000.prop1.float64_deep": "fixed D-Minv's rounding in float64 against Prop. 1's bound, per test matrix",
        "000.prop1.rounding_growth": "fixed D-Minv's rounding growth per layer against Prop. 1's factor L",
        "000.prop1.float32_bounded": "fixed D-Minv's rounding in float32 against Prop. 1's bound, per test matrix",
        "000.cost.l_over_ln_l": "a count (the smallest K reaching a precision) of fixed D-Minv, no training",
        "000.thm.frob_slope": "fixed D-Minv (untrained): each run's loss is a mean over its drawn test set, the "
        "slope fitted across K on the same matrices",
        "000.fig1b.floor_1e8": "fixed D-Minv's loss at K > 15 (untrained): a mean over its drawn test set against "
        "a level 13 orders away in float64",
        "000.table3.init_decreases": "untrained D-SVD: each run's error is a mean over its 30 drawn test matrices, "
        "the same 30 for every K_svd (paired)",
        "000.table3.init_values": "untrained D-SVD: each run's error is a mean over its 30 drawn test matrices",
        "000.table3.literal_rule_uphill": "untrained D-SVD (the literal step rule): a mean over the same 30 drawn "
        "test matrices as the box rule's (paired)",
    },
    {
        cid: RuleChange(
            "2026-11-29",
            f"decided on the grid's 2 seeds (problem draws) of {grid}",
            verdict,
            "one draw decides nothing close: a claim whose randomness is in the problem needs at least 3 draws "
            "(issue 43), and this grid ran 2 (its store of 2026-11-27 is gone)",
            needs=f"problem draws: {grid} on 3 seeds (the grid's repeat: 3)",
        )
        for cid, grid, verdict in (
            ("000.fig1a.depth_over_order", "fig1_kl", "holds"),
            ("000.fig1a.values", "fig1_kl", "does not hold"),
            ("000.fig1b.ld_beats_d", "fig1_k", "holds"),
            ("000.fig1b.paper_sgd", "fig1_k", "does not hold"),
            ("000.fig1c.ld_beats_d", "fig1_l", "holds"),
        )
    },
)
