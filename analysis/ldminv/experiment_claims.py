"""Claims of paper 000 on its experiments: Fig. 1 (LD-Minv against D-Minv in depth K and order L, with the
slope of fixed D-Minv's loss in L), Table 2 (LD-Minv against D-Minv in the condition number kappa) and Table 3
(D-SVD), decided by the verdicts of analysis/ldminv/verdicts.py. analysis/ldminv/claims.py gathers them with
the theory's claims."""

from __future__ import annotations

from analysis.claims import FAILS, UNDECIDED, Claim, RuleChange, twins
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
ISSUE43 = "2026-11-29"

FIG1 = "the paper's Fig. 1 setting: 100x100 Gaussian (std 1/sqrt d), c0 = ||A||_2^2, 2000-matrix pool, 1200 iterations"
TABLE2 = "the paper's Table 2 setting: 100x100 U S V, K = 4, L = 10, online batches of 100, 1200 iterations"
TABLE3 = "the paper's Table 3 setting: 50x100 Gaussian M, inner LD-Minv K = 6, L = 4, box step rule"
SPEC_TABLE2_LD = (
    "spec 7.3, Adam 1e-3, c0 fro, D -> LD: kappa 2 29.9 -> 12.2, 5 9.81 -> 14.2, 10 4.32 -> 7.90, 1000 2.56 -> 3.25"
)
TABLE2_ADAM = TABLE2 + "; c0 = ||A||_F^2, Adam 1e-3"
SPEC_TABLE3_INIT = "spec 3.4 [OURS]: 16.55, 2.82, 2.08, 1.28, 0.87, 0.64, 0.40 at K_svd 1..60"

EXPERIMENT_CLAIMS = [
    Claim(
        "000.fig1a.depth_over_order",
        PAPER,
        TASK,
        twins("fig1_kl"),
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
        twins("fig1_kl"),
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
        twins("fig1_k"),
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
        twins("fig1_l"),
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
        twins("fig1_k"),
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
        twins("fig1_k"),
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
        twins("fig1_kl", "fig1_k"),
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
        twins("table2_kappa"),
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
        twins("table2_kappa"),
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
        regime=TABLE2_ADAM,
        spec=SPEC_TABLE2_LD,
        paper_says="LD-Minv beats D-Minv for kappa >= 2 (narrowed here to kappa >= 4): 3.62 vs 2.36 at kappa 4 ... "
        "3.21 vs 2.25 at 1000",
    ),
    Claim(
        "000.table2.ld_flat",
        PAPER,
        TASK,
        twins("table2_kappa"),
        "LD-Minv is flat in kappa for kappa >= 10 (within 0.5 log10)",
        table2_ld_flat,
        expected=FAILS,
        why_expected="flat only for kappa >= 50: at kappa = 10 the problem is easier than the paper's numbers say "
        "(our D-Minv 4.3 vs the paper's 2.27, the same Lemma 1 contradiction as the small-kappa row), and LD-Minv "
        "improves on it to about 7.9",
        regime=TABLE2_ADAM,
        spec=SPEC_TABLE2_LD,
        paper_says="LD-Minv about flat in kappa: 3.30, 3.21, 3.22, 3.21 for kappa 10, 50, 100, 1000",
    ),
    Claim(
        "000.table2.large_kappa_values",
        PAPER,
        TASK,
        twins("table2_kappa"),
        "Table 2 values at kappa >= 50 within 0.5 log10 of the paper (c0 = ||A||_F^2, Adam)",
        table2_large_kappa_values,
        regime=TABLE2_ADAM,
        spec="spec 7.3: D-Minv 2.57 / 2.52 / 2.53 at kappa 50 / 100 / 1000 (0.27-0.31 above the paper's 2.26-2.25); "
        "LD 3.25 at kappa 1000",
        paper_says="-log10 TestLoss at kappa 50, 100, 1000: D-Minv 2.26, 2.26, 2.25; LD-Minv 3.21, 3.22, 3.21",
    ),
    Claim(
        "000.table2.small_kappa_dminv",
        PAPER,
        TASK,
        twins("table2_kappa"),
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
        twins("table2_kappa"),
        "on easy data (kappa <= 2) D-Minv is at least as good as LD-Minv and strictly better somewhere",
        table2_easy_data_dminv_better,
        regime=TABLE2_ADAM,
        spec="spec 7.3: kappa 2, D 29.9 -> LD 12.2 (Adam 1e-3)",
        paper_says="D-Minv better at kappa = 1 (7.64 vs 5.95)",
    ),
    Claim(
        "000.table3.init_decreases",
        PAPER,
        TASK,
        twins("table3_dsvd"),
        "untrained D-SVD test loss falls with K_svd",
        dsvd_untrained_decreases,
        regime=TABLE3 + ", untrained",
        spec=SPEC_TABLE3_INIT,
        paper_says="untrained loss falls with K_svd (44.998 -> 5.015)",
    ),
    Claim(
        "000.table3.init_values",
        PAPER,
        TASK,
        twins("table3_dsvd"),
        "untrained D-SVD test loss within 2x of the paper's Init row",
        dsvd_paper_init_row,
        expected=FAILS,
        why_expected="spec 7.5: the box-rule Cayley solver decays much faster than the paper's Init row",
        regime=TABLE3 + ", untrained",
        spec=SPEC_TABLE3_INIT,
        paper_says="Init Test Loss 44.998, 35.900, 26.661, 15.613, 10.356, 7.706, 5.015 at K_svd 1..60",
    ),
    Claim(
        "000.table3.literal_rule_uphill",
        PAPER,
        TASK,
        twins("table3_dsvd"),
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
        twins("table3_dsvd_paper", "table3_dsvd"),
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
]
