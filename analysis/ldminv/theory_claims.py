"""Claims of paper 000 on its theory: Lemma 1 (D-Minv's exact error), Prop. 1 (the invariant spaces, and
rounding against them), the cost in L, Lemma 2 (the gradient in the coefficients C), Theorem 1 (linear
convergence of training), Theorem 2 (the generalisation gap) and Prop. 4 (the floor of |C - 1|), decided by
analysis/ldminv/theory_checks.py and analysis/ldminv/lemma2.py. analysis/ldminv/claims.py gathers them with
the experiments' claims."""

from __future__ import annotations

from analysis.claims import FAILS, UNDECIDED, Claim, RuleChange, twins
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

TASK = "ldminv"
PAPER = "000"
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
THM2_PRACTICE = (
    "practice: Adam 1e-2 from C = 1 on 20x20 Gaussian (Thm 2 assumes GD from |C - 1| = O(K^-alpha), alpha >= 1)"
)
THM2_BOUND = "Thm 2: gap <= O~(min{b d^3 L / K^(alpha/2), sqrt(d^3 K / n)}) + O(sqrt(ln(1/delta)/n))"
SPEC_PROP1 = "spec 4.2: 2e-15 -> 4e-13 over 6 layers at L = 4"


def _thm2_slope_rule(old_verdict: str) -> RuleChange:
    """The change of 2026-11-29 to Theorem 2's slope rule in n (the same for inside and outside its hypotheses)."""
    return RuleChange(
        ISSUE43,
        "the slope of the median resolved gap per n against n, <= -0.4 holds, else does not hold",
        old_verdict,
        "the median slope carried no uncertainty: the three draws' gaps at one n differ in sign and by 10x "
        "(e.g. -0.0021, +0.0018, -0.0005 at n = 10), far more than their test noise; a rule changed after "
        "the results of 2026-11-29, recorded here: the slope over every resolved run with its standard error, "
        "holds when slope + 2 SE <= -0.4, does not hold when slope - 2 SE > -0.4",
    )


THEORY_CLAIMS = [
    Claim(
        "000.lemma1.exact",
        PAPER,
        TASK,
        twins("theory_lemma1"),
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
        twins("theory_lemma1"),
        "X_k A A+ = X_k = A+ A X_k at machine precision in float64 (K = 8)",
        prop1_invariance(1e-10),
        regime="inside Prop. 1 up to rounding: float64, K = 8",
        spec=SPEC_PROP1,
        paper_says="Prop. 1: X_k A A+ = X_k = A+ A X_k for all k",
    ),
    Claim(
        "000.prop1.float64_deep",
        PAPER,
        TASK,
        twins("theory_prop1"),
        "invariant spaces stay below 1e-6 to K = 20 in float64 on rank-deficient A",
        prop1_invariance(1e-6),
        expected=FAILS,
        why_expected="Prop. 1 is exact arithmetic; float64 rounding in the null space grows by L = 4 per layer, "
        "4^20 x 1e-16 = 1e-4 at K = 20 (see 000.prop1.rounding_growth)",
        regime="outside Prop. 1's exact arithmetic: float64 rounding, 100x100 rank 50, K to 20",
        spec=SPEC_PROP1,
        paper_says="Prop. 1: X_k A A+ = X_k = A+ A X_k for all k (exact arithmetic)",
    ),
    Claim(
        "000.prop1.rounding_growth",
        PAPER,
        TASK,
        twins("theory_prop1"),
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
        twins("theory_prop1"),
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
        twins("theory_cost"),
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
        twins("theory_lemma2"),
        "Lemma 2: at C = 0 the training loss decreases in every C_k (dL/dC_k < 0)",
        lemma2_gradient,
        regime=LEMMA2_REGIME,
        paper_says="Lemma 2: dL/dC_k < 0 for all C_k in [0, 1 + eps]",
    ),
    Claim(
        "000.lemma2.order",
        PAPER,
        TASK,
        twins("theory_lemma2"),
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
        twins("theory_lemma2"),
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
        twins("theory_lemma2"),
        "Lemma 2: at C = 1 the gradient dL/dC_k (k < K) is about 0: within 1 % of its value at C = 0",
        gradient_flat_at_one,
        regime=LEMMA2_REGIME,
        paper_says="Lemma 2: D_[C_k] L ~ 0 for k in [K-1] when C_k in [1 - eps, 1 + eps]",
    ),
    Claim(
        "000.lemma2.one_not_minimum",
        PAPER,
        TASK,
        twins("theory_lemma2"),
        "Lemma 2: C = 1 is not a local minimum of the training loss (the loss falls along -grad from C = 1)",
        one_not_a_minimum,
        regime=LEMMA2_REGIME,
        paper_says="Lemma 2: C_k = 1 for all k is not a global or even local minimum for the training loss",
    ),
    Claim(
        "000.lemma2.c_to_one",
        PAPER,
        TASK,
        twins("theory_lemma2"),
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
        twins("theory_thm1"),
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
        twins("theory_thm1"),
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
        twins("theory_thm2_gap_n", "theory_thm2"),
        "the generalisation gap falls at least like n^-1/2",
        thm2_gap_n,
        expected=UNDECIDED,
        why_expected="measured on 2026-11-27: the gaps are 1e-5..1e-3 of an O(1) loss, at the sampling noise of the "
        "1000-matrix test set (K*L shared coefficients generalise almost perfectly): no n^-1/2 trend is resolvable "
        "without a test set far larger",
        regime=THM2_PRACTICE,
        paper_says=THM2_BOUND,
        history=(
            THM2_NOISE,
            _thm2_slope_rule("does not hold (slope +0.17 of the medians)"),
        ),
    ),
    Claim(
        "000.thm2.gap_in_n_inside",
        PAPER,
        TASK,
        twins("theory_thm2_inside"),
        "inside Theorem 2's hypotheses, the generalisation gap falls at least like n^-1/2 (gaps resolved above the "
        "test set's noise)",
        thm2_gap_n,
        regime="inside Thm 2: full-batch GD from C = 1 + U(-1,1)/K (alpha = 1), K = 8 (K^1.5 >= sqrt n), sigma in "
        "[1/2, 1] (20x20 U S V), L = 4, 100,000 test matrices",
        paper_says=THM2_BOUND,
        history=(_thm2_slope_rule("holds (slope -0.59 of the medians)"),),
    ),
    Claim(
        "000.thm2.double_descent",
        PAPER,
        TASK,
        twins("theory_thm2_gap_k", "theory_thm2"),
        "the gap first grows then falls in K (double descent of the bound)",
        thm2_double_descent,
        expected=UNDECIDED,
        why_expected="the measured gaps are at the test set's noise (000.thm2.gap_in_n): no shape in K is resolvable",
        regime=THM2_PRACTICE,
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
        twins("theory_prop4"),
        "|C - 1| = delta leaves ||e_K||_inf within the bound and of order 2 delta",
        prop4_floor,
        regime="inside Prop. 4: |C - 1| = delta fixed (no training), 100x100 U S V at kappa 10, K = 8, L = 4",
        spec="spec 4.9: the floor is about 2 delta",
        paper_says="Prop. 4: ||e_k||_inf <= e0^(L^k) + (17/8) delta",
    ),
]
