"""Claims of paper 004 (Allen-Zhu & Li, backward feature correction) on the synthetic protocol of spec
3.10; the claim numbers are spec 4's C1-C12. The paper has no synthetic numbers: beside each measured
value stands the spec's PROTOTYPE number (spec 3.11, one run per row, not the paper's)."""

from __future__ import annotations

from analysis.claims import FAILS, Claim, RuleChange, on_drawn_problems, twins
from analysis.hierarchical.checks import (
    bfc_lower_features_improve,
    correction_is_local,
    deeper_window_better,
    distillation_keeps_features,
    feature_error_grows_with_gap,
    gap_matters_at_depth,
    joint_beats_layerwise,
    kernels_need_more_samples,
    layerwise_plateaus,
    overparameterisation_needed,
    quadratic_nets_win,
    staging_matches_all_from_start,
    truncation_changes_nothing,
)

TASK = "hierarchical"
ISSUE43 = "2026-11-29"


GAUSSIAN_L4 = (
    "measured (c1, Gaussian L = 4, medians over gamma and 3 seeds): joint training makes fe_2 worse while layers 3 "
    "and 4 are added (0.047 -> 0.13 -> 0.16, final 0.10), most at gamma 0.1 (0.0083 -> 0.015 -> 0.054) where stage 4 "
    "also raises the test MSE (0.0083 -> 0.028) though layer 4 carries 0.26% of the variance: the layer-4 term has "
    "kurtosis ~2e4, so a few training points carry its variance and their minibatch gradients pull the trainable "
    "layer-2 features (layer-wise freezes them); the test MSE is 50-100x the median squared error there "
    "(docs/hierarchical.md); truncating the learner's inner activation (B tanh(z/B))^2, B = 5, does not restore "
    "it (c1_gaussian_l4_tails: joint fe_2 0.047 -> 0.154 -> 0.172 -> 0.101)"
)
SETTING = "spec 3.10's synthetic protocol: d = 20, k = (6, 4, 3), m = 64, n = 2e4, Adam 3e-3, 10 + 10 epochs per layer"


CLAIMS: list[Claim] = [
    Claim(
        "004.C1.joint_beats_layerwise",
        "004",
        TASK,
        twins("c1_joint_vs_layerwise"),
        "training all layers together (joint) beats layer-wise training in every (L, gamma, inputs) cell",
        joint_beats_layerwise,
        regime=SETTING + "; L in {3, 4}, gamma in {0.1, 0.3, 1}, uniform and Gaussian inputs",
        spec="spec 3.11 prototype (1 seed each), joint vs layer-wise: L=3 g=0.3 uniform 0.00115 vs 0.0333 (29x), "
        "g=0.1 0.00042 vs 0.0078, g=1 0.00166 vs 0.123, Gaussian g=0.3 0.00406 vs 0.0344 (8.5x), L=4 g=0.3 0.00138 vs "
        "0.0488 (35x)",
        paper_says="training all layers together beats layer-wise training (Fig. 6, CIFAR; no synthetic number)",
    ),
    Claim(
        "004.C1.layerwise_plateaus",
        "004",
        TASK,
        twins("c1_joint_vs_layerwise"),
        "layer-wise training barely improves after stage 2; joint keeps improving",
        layerwise_plateaus,
        regime=SETTING + "; L in {3, 4}, gamma in {0.1, 0.3, 1}, uniform and Gaussian inputs",
        spec="spec 3.11 prototype L=3 g=0.3: layer-wise 0.0425 -> 0.0333; L=4: 0.070 -> 0.0488 (joint 0.070 -> 0.0014)",
        paper_says="layer-wise training stops improving with depth (footnote 6; no synthetic number)",
    ),
    Claim(
        "004.C2.bfc",
        "004",
        TASK,
        twins("c1_joint_vs_layerwise"),
        "the layer-2 feature error falls as higher layers are trained (joint) and stays put under layer-wise "
        "(uniform inputs)",
        bfc_lower_features_improve("uniform"),
        regime=SETTING + "; uniform (bounded) inputs, decided at the deepest L (4)",
        spec="spec 3.11 prototype L=4 g=0.3 uniform: fe_2 0.0251 -> 0.0096 -> 0.0029 -> 0.0015 joint, constant 0.0251 "
        "layer-wise",
        paper_says="Theorem 2 / Fig. 9: training higher layers improves lower-layer features",
    ),
    Claim(
        "004.C2.bfc_gaussian",
        "004",
        TASK,
        twins("c1_joint_vs_layerwise"),
        "the layer-2 feature error falls as higher layers are trained (joint) and stays put under layer-wise "
        "(Gaussian inputs, untruncated activation)",
        bfc_lower_features_improve("gaussian"),
        expected=FAILS,
        why_expected=GAUSSIAN_L4,
        regime=SETTING + "; inside the paper's regime: its theorem covers standard Gaussian inputs (Prop. 5.1); plain "
        "z^2 activation, labels of kurtosis 1e3-2e4 at L = 4; decided at the deepest L (4)",
        history=(
            RuleChange(
                ISSUE43,
                "the same check, labelled 'outside the theory's bounded regime' (a check of practice)",
                "does not hold, counted as outside the regime",
                "the paper's theorem covers Gaussian inputs (standard Gaussian and mixtures, Prop. 5.1): the claim "
                "is decided inside it, where it does not hold, and the truncated activation (B tanh(z/B))^2 does not "
                "restore it (grids/hierarchical/investigations/c1_gaussian_l4_tails.yaml)",
            ),
        ),
        spec="spec 6.3: Gaussian-input labels have kurtosis ~1e4 at L = 4: 'MSE estimates are dominated by rare "
        "points, SGD steps blow up'",
        paper_says="Theorem 2 / Fig. 9: training higher layers improves lower-layer features",
    ),
    Claim(
        "004.C3.gap_overfit",
        "004",
        TASK,
        twins("c3_gap_sweep"),
        "fe_2 right after stage 2 grows with gamma like gamma^a, 1 < a <= 2",
        feature_error_grows_with_gap,
        regime=SETTING + "; L = 3, uniform, gamma 0.05..1",
        spec="spec 3.11 prototype: 0.0036, 0.0174, 0.114 at gamma 0.1, 0.3, 1 (slope 1.5)",
        paper_says="Theorem 2: the over-fitting of layer l is of the size of the next layer's weight",
    ),
    Claim(
        "004.C4.window",
        "004",
        TASK,
        twins("c4_window"),
        "the final test MSE falls monotonically with the BFC window w",
        deeper_window_better,
        regime=SETTING + "; L = 4, gamma = 0.3, uniform",
        spec="spec 3.11 prototype L=4: w=0 0.0488, w=1 0.0068, w=2 0.0014",
        paper_says="Fig. 9/14: BFC must reach several layers back",
    ),
    Claim(
        "004.C5.local",
        "004",
        TASK,
        ("c5_locality_adam", "c5_locality", "small_c5_locality_adam", "small_c5_locality"),
        "BFC is a local correction: W_2 rows after stage 2 and at the end have cosine > 0.9 (Adam, the learner's "
        "default, at m 6 and 64; the optimiser state reset at every phase, the learner's default)",
        correction_is_local("reset"),
        expected=FAILS,
        why_expected="measured on 2026-11-27: Adam at m = 64 (the default width) ends with cosine 0.30 to its weights "
        "after stage 2 (0.997 at m = 6): the correction that finishes moves W_2 far",
        history=(
            RuleChange(
                ISSUE43,
                "decided on the SGD runs (cosine > 0.9 and above cosine(init, final) at every m)",
                "holds",
                "SGD ends with a test error 13-18x Adam's: it has not finished the correction whose locality the claim "
                "is about. The claim is decided on Adam (the learner's default optimiser); SGD is a labelled "
                "investigation (004.C5.local_sgd)",
            ),
        ),
        regime=SETTING + "; L = 3, gamma = 0.3, uniform, m in {6, 64}, optimiser state reset at every phase",
        spec="spec 3.11 prototype (one optimiser state for the whole run): SGD m=64 0.984 (init 0.435), Adam m=6 "
        "0.996, Adam m=64 0.653",
        paper_says="Fig. 9: correlation with the pre-BFC weights > 0.9, with the init ~0.03-0.35",
    ),
    Claim(
        "004.C5.local_kept_state",
        "004",
        TASK,
        twins("c5_locality"),
        "investigation beside C5: the same with one Adam state kept across all phases, as the spec's prototype",
        correction_is_local("keep"),
        expected=FAILS,
        why_expected="measured on 2026-11-27: Adam at m = 64 ends with cosine 0.59 (0.997 at m = 6)",
        post_hoc=True,
        history=(
            RuleChange(
                ISSUE43,
                "decided on the SGD runs, counted in the tallies",
                "holds",
                "SGD has not finished the correction (13-18x Adam's test error); a non-default optimiser state is an "
                "investigation beside the claim, outside the tallies",
                needs="c5_locality's Adam cells with the state kept (6 runs, ~2 CPU-min each on this machine)",
            ),
        ),
        regime=SETTING + "; L = 3, gamma = 0.3, uniform, m in {6, 64}, one optimiser state for the whole run",
        spec="spec 3.11 prototype (one optimiser state for the whole run): SGD m=64 0.984 (init 0.435), Adam m=6 "
        "0.996, Adam m=64 0.653",
        paper_says="Fig. 9: correlation with the pre-BFC weights > 0.9, with the init ~0.03-0.35",
    ),
    Claim(
        "004.C5.local_sgd",
        "004",
        TASK,
        twins("c5_locality"),
        "investigation beside C5: the same on SGD + momentum (state reset at every phase), which ends with 13-18x "
        "Adam's test error",
        correction_is_local("reset", "sgd"),
        regime=SETTING + "; L = 3, gamma = 0.3, uniform, m in {6, 64}, SGD + momentum, state reset at every phase",
        spec="spec 3.11 prototype (one optimiser state for the whole run): SGD m=64 0.984 (init 0.435)",
        paper_says="Fig. 9: correlation with the pre-BFC weights > 0.9, with the init ~0.03-0.35",
        post_hoc=True,
    ),
    Claim(
        "004.C6.kernels",
        "004",
        TASK,
        twins("c6_kernels"),
        "at the same n, kernel ridge / NTK / random features stay far above the network's error",
        kernels_need_more_samples,
        regime=SETTING + "; L = 3, gamma = 0.3, uniform, n 1e3..2e4 (the default target, not Appendix I's hard "
        "instances)",
        spec="spec 3.11 prototype poly ridge: p=4 0.619 (n=2000), 0.291 (n=8000); p=8 0.725, 0.372; network "
        "0.0006-0.0012 at n=2e4",
        paper_says="Thm I.1/I.3: kernels need d^Omega(2^(L-1)) samples",
    ),
    Claim(
        "004.C7.overparam",
        "004",
        TASK,
        twins("c7_overparam"),
        "a W-path of width m = k_2 does worse than an over-parameterised one",
        overparameterisation_needed,
        expected=FAILS,
        why_expected="spec prototype: m = 6 worked as well as m = 64 at this scale",
        regime=SETTING + "; L = 4, gamma = 0.3, uniform, m 6..96",
        spec="spec 3.11 prototype (1 seed, L=3): m=6 0.00049 vs m=64 0.00115, i.e. not needed at this scale",
        paper_says="Sec. 6.1 / footnote 22: over-parameterisation gives the richer representation the next layer needs",
    ),
    Claim(
        "004.C8.distill",
        "004",
        TASK,
        ("c8_distill_default", "c8_distill", "small_c8_distill_default", "small_c8_distill"),
        "without lam3-5 the output still fits but S_2 matches S*_2 only up to a linear map, not a rotation (at the "
        "default weight decay lam6 = 1e-5 > 0, as the paper's lam6)",
        distillation_keeps_features(),
        expected=FAILS,
        why_expected="measured on 2026-11-27: at lam6 = 1e-5 and lam_mult = 0 the output does not fit (test MSE 0.034 "
        "against 0.00044 with lam3-5) and fe_2 orth is 1: weight decay is K_2's only gradient in stage 2^Nabla and "
        "shrinks it to about 0, so both parts fail",
        history=(
            RuleChange(
                ISSUE43,
                "decided at weight decay lam6 = 0 where the grid has such runs",
                "holds",
                "the switch to lam6 = 0 was made after the default setting's result; the paper has lam6 > 0 and the "
                "learner's default is 1e-5, where both parts fail. lam6 = 0 is a labelled investigation "
                "(004.C8.distill_wd0), outside the tallies",
            ),
        ),
        regime=SETTING + "; L = 3, gamma = 0.3, uniform, the learner's default weight decay lam6 = 1e-5 (the paper's "
        "lam6 > 0); lam6 = 0 beside (004.C8.distill_wd0)",
        spec="spec 3.11 prototype lam=0: MSE 0.0035 vs 0.00115, fe_2 orth 1.05 vs 0.0009, linear 0.026",
        paper_says="lam3-5 play no role in BFC, but without them S_l loses meaning",
    ),
    Claim(
        "004.C8.distill_wd0",
        "004",
        TASK,
        twins("c8_distill"),
        "investigation beside C8: the same without weight decay (lam6 = 0), so that the lam_mult = 0 cells measure "
        "the distillation term alone",
        distillation_keeps_features(0.0),
        regime=SETTING + "; L = 3, gamma = 0.3, uniform, lam6 = 0 (not the paper's lam6 > 0)",
        spec="spec 3.11 prototype lam=0: MSE 0.0035 vs 0.00115, fe_2 orth 1.05 vs 0.0009, linear 0.026",
        paper_says="lam3-5 play no role in BFC, but without them S_l loses meaning",
        post_hoc=True,
    ),
    Claim(
        "004.C9.staging",
        "004",
        TASK,
        twins("c9_staging"),
        "staged training and training all layers from the start reach similar errors",
        staging_matches_all_from_start,
        regime=SETTING + "; L in {3, 4}, gamma = 0.3, uniform",
        spec="spec 3.11 prototype L=3: all-from-start 0.00052 vs staged 0.00115",
        paper_says="Sec. 4 / footnote 29: layer-wise pre-training gives almost identical performance to "
        "training all layers from the start",
    ),
    Claim(
        "004.C10.gap",
        "004",
        TASK,
        twins("c10_gap_needed"),
        "at L = 4 joint training degrades as gamma -> 1",
        gap_matters_at_depth,
        regime=SETTING + "; L = 4, uniform, gamma 0.1..1",
        spec="spec 3.11 prototype at L=3 with gamma=1 still reached 0.0017 (the gap is sufficient, not necessary, at "
        "small depth)",
        paper_says="Sec. 3.1: without an information gap hierarchical learning may fail",
    ),
    Claim(
        "004.C11.truncation",
        "004",
        TASK,
        twins("c11_truncation"),
        "training with the truncated activation leaves E(F - F~)^2 ~ 0",
        truncation_changes_nothing,
        expected=FAILS,
        why_expected="measured here (Gaussian inputs, B' = 3, 5, 10 x the pre-activation RMS): the truncation "
        "bites on the tails, gap 0.27, 0.075, 0.006 (falling with B'); the theory's B' is poly(d/eps)-large",
        regime="outside Remark 2.1's B' = poly(d/eps): B' = 3, 5, 10 x the pre-activation RMS, Gaussian inputs, L = 3",
        paper_says="Remark 2.1 / Claim D.1: the truncation is inactive at the end, the returned net is truly quadratic",
    ),
    Claim(
        "004.C12.quadratic",
        "004",
        TASK,
        twins("c12_densenet"),
        "on this polynomial target a quadratic plain DenseNet beats a ReLU one",
        quadratic_nets_win,
        regime=SETTING + "; plain DenseNet, all layers from the start",
        spec="spec: on a polynomial target the quadratic nets should win (no prototype number)",
        paper_says="Fig. 12 (CIFAR): quadratic WRN-22-10 95.08% vs ReLU 96.59% (comparable)",
    ),
]

# The problem is a draw (the target W* from target_seed, the inputs from data_seed, each None reading the seed):
# one draw decides nothing close (issue 43), so every claim is refused a verdict on fewer than 3 of them. C6 was
# decided on 2 seeds, reopened, and decided again on c6_kernels' 3 seeds (2026-11-29, 75 runs, 74 min of wall time).
CLAIMS = on_drawn_problems(
    CLAIMS,
    "target_seed+data_seed",
    {},
    {
        "004.C6.kernels": RuleChange(
            "2026-11-29",
            "decided on c6_kernels' 2 seeds (problem draws: target and data)",
            "holds",
            "one draw decides nothing close: a claim whose randomness is in the problem needs at least 3 draws "
            "(issue 43), and this grid ran 2",
        )
    },
)
