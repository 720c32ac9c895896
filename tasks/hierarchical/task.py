"""hierarchical: backward feature correction on a synthetic hierarchical target (paper 004, Allen-Zhu & Li).

The paper's experiments need CIFAR and GPU-days; spec 3.10 derives a synthetic protocol testing the
same claims: a normalised degree-2^L target with skip graph J and information gap gamma (spec 1.7),
the K/W learner of spec 2.2 trained by the epoch-staged recipe of spec 2.9 under the protocols joint,
layerwise, window and all_from_start, the plain DenseNet of spec 2.1, and kernel baselines (C6).
Every run records the target's constants (normalisation, variance shares, kurtosis) beside its metrics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from tasks.base import Checkpoint, FieldType, FromSpec, Result, RunContext
from tasks.common import generator
from tasks.hierarchical import flops as FL
from tasks.hierarchical.data import make_data
from tasks.hierarchical.densenet import train_densenet
from tasks.hierarchical.kernels import run_kernel
from tasks.hierarchical.params import MAX_L, SPEC, DenseNetParams, KernelParams, WKParams
from tasks.hierarchical.target import (
    Target,
    kurtosis,
    make_target,
    sample_inputs,
    variance_shares,
)
from tasks.hierarchical.train_wk import CURVE_COLUMNS, Trainer
from tasks.status import PREEMPTED

LAYERS = range(2, MAX_L + 1)


def target_summary(p: Any, target: Target) -> dict[str, Any]:
    """Constants of the target (spec 1.7 asks to record them): y scale, kurtosis, per-layer variance
    shares and the normalisation factors, estimated on the normalisation sample."""
    x = sample_inputs(p.n_mc, p.d, p.dist, generator(p.tseed(), "hierarchical", "normalisation"))
    terms = target.layer_terms(x)
    shares = variance_shares(terms)
    out: dict[str, Any] = {"y_scale": target.y_scale, "y_kurtosis": kurtosis(terms.sum(1))}
    for layer in LAYERS:
        ok = layer <= target.depth
        out[f"var_share_l{layer}"] = shares[layer - 2] if ok else math.nan
        out[f"alpha_eff_l{layer}"] = target.alpha_eff(layer) if ok else math.nan
        out[f"layer_scale_l{layer}"] = target.layer_scales[layer] if ok else math.nan
        out[f"kurtosis_l{layer}"] = kurtosis(terms[:, layer - 2]) if ok else math.nan
    return out


def _after_fields() -> dict[str, FieldType]:
    out: dict[str, FieldType] = {}
    for top in LAYERS:
        out[f"mse_after_l{top}"] = "float"
        out[f"train_mse_after_l{top}"] = "float"
        for low in range(2, top + 1):
            out[f"fe{low}_after_l{top}"] = "float"
    return out


class HierarchicalTask(FromSpec, spec=SPEC):
    thread_safe: ClassVar[bool] = True  # own generators, no shared mutable state (tasks.base.is_thread_safe)
    summary_fields: ClassVar[dict[str, FieldType]] = {
        "test_mse": "float",
        "train_mse": "float",
        "val_mse": "float",
        "test_median_se": "float",
        "diverged": "bool",
        "flops_per_sample": "float",
        "y_scale": "float",
        "y_kurtosis": "float",
        **{
            f"{prefix}{i}": "float"
            for prefix in ("var_share_l", "alpha_eff_l", "layer_scale_l", "kurtosis_l")
            for i in LAYERS
        },
        "test_mse_trunc": "float",
        "trunc_gap": "float",
        **{f"{prefix}{i}": "float" for prefix in ("fe_orth_l", "fe_lin_l", "reg_gap_l") for i in LAYERS},
        **_after_fields(),
        "wcorr_w2_pre_post": "float",
        "wcorr_k2_pre_post": "float",
        "wcorr_w2_init_final": "float",
        "wgram_change_w2": "float",
        "ridge": "float",
        "n_monomials": "float",
    }
    curve_fields: ClassVar[dict[str, FieldType]] = {
        c: ("int" if c in ("phase", "top") else "float") for c in CURVE_COLUMNS
    }
    _small: ClassVar[dict[str, Any]] = {"d": 6, "n_mc": 4000, "n_train": 400, "n_val": 100, "n_test": 400}
    examples: ClassVar[list[dict[str, Any]]] = [
        {
            **_small,
            "learner": "wk",
            "L": 3,
            "k": [3, 2],
            "m": 8,
            "batch": 50,
            "epochs_per_stage": 2,
            "final_epochs": 2,
            "log_every": 1,
        },
        {
            **_small,
            "learner": "wk",
            "L": 3,
            "k": [3, 2],
            "m": 8,
            "batch": 50,
            "protocol": "layerwise",
            "epochs_per_stage": 1,
            "final_epochs": 1,
            "dist": "gaussian",
            "seed": 1,
        },
        {
            **_small,
            "learner": "wk",
            "L": 4,
            "k": [3, 2, 2],
            "m": 8,
            "batch": 100,
            "protocol": "window",
            "window": 1,
            "epochs_per_stage": 1,
            "final_epochs": 1,
            "optimizer": "sgd",
            "lr": 0.01,
            "final_lr": 0.005,
            "clip": 10.0,
        },
        {
            **_small,
            "learner": "wk",
            "L": 3,
            "k": [3, 2],
            "m": 8,
            "batch": 100,
            "protocol": "all_from_start",
            "epochs_per_stage": 1,
            "final_epochs": 1,
            "trunc_b": 3.0,
            "dtype": "float32",
        },
        {
            **_small,
            "learner": "densenet",
            "L": 3,
            "k": [3, 2],
            "m": 8,
            "batch": 100,
            "epochs": 2,
            "final_epochs": 1,
            "activation": "relu",
            "log_every": 1,
        },
        {**_small, "learner": "kernel", "L": 3, "k": [3, 2], "kernel": "poly"},
        {**_small, "learner": "kernel", "L": 3, "k": [3, 2], "kernel": "ntk", "data_seed": 3},
        {**_small, "learner": "kernel", "L": 3, "k": [3, 2], "kernel": "rf", "n_features": 64},
    ]
    # Plain SGD (no momentum, no clip) at lr 50 on the quartic objective: the first steps overshoot and
    # the loss passes 1e150 within the first epoch.
    diverging_example: ClassVar[dict[str, Any] | None] = {
        **_small,
        "learner": "wk",
        "L": 3,
        "k": [3, 2],
        "m": 8,
        "batch": 50,
        "optimizer": "sgd",
        "momentum": 0.0,
        "lr": 50.0,
        "epochs_per_stage": 2,
        "final_epochs": 1,
    }

    def growable_budget(self, p: WKParams | DenseNetParams | KernelParams) -> str | None:
        """wk and densenet: `final_epochs`, the last phase (every layer in, at final_lr): a longer final phase
        follows a shorter one exactly and goes on (the batch order's generator and the optimiser's state are in
        the checkpoint; the curve's stage-end row at a shorter run's last epoch follows its last save, so a longer
        run logs it only on its cadence). The stages before it (`epochs_per_stage`, densenet's `epochs`) do not
        grow: a longer stage changes every epoch after it, and the stages end in distillations and optimiser
        resets. kernel: None, a closed-form fit with no steps (its one checkpoint is its result)."""
        return None if isinstance(p, KernelParams) else "final_epochs"

    def run(self, p: WKParams | DenseNetParams | KernelParams, ctx: RunContext) -> Result:
        target = make_target(p)
        data = make_data(target, p)
        summary = target_summary(p, target)
        if isinstance(p, KernelParams):
            if ctx.resume is not None:  # the fit, saved whole
                out, flops = dict(ctx.resume.state["fit"]), float(ctx.resume.state["flops"])
            else:
                out, flops = run_kernel(p, data, ctx.device)
                fit = {"fit": dict(out), "flops": flops}
                if not ctx.checkpoint(1, lambda: Checkpoint(1, {}, fit), last=True):
                    return Result(status=ctx.stop_status())
            summary.update(out)
            summary["diverged"] = False
            summary["flops_per_sample"] = flops / p.n_train
            return Result(status="ok", summary=summary, curve={}, flops=flops, n_steps=1)
        if isinstance(p, DenseNetParams):
            status, curve, s, flops, steps, div = train_densenet(p, target, data, ctx)
            if status == PREEMPTED:  # saved: the runner stores nothing of this attempt
                return Result(status=status)
            summary.update(s)
            summary["flops_per_sample"] = 3.0 * FL.densenet_forward(p.d, p.m, target.graph, p.L)
        else:
            o = Trainer(p, target, data, ctx).run()
            if o.status == PREEMPTED:  # saved: the runner stores nothing of this attempt
                return Result(status=o.status)
            status, curve, flops, steps, div = o.status, o.curve, o.flops, o.n_steps, o.diverged_step
            summary.update(o.summary)
            summary["flops_per_sample"] = 3.0 * FL.wk_forward(p.d, target.ks, p.m, target.graph, p.L)
        summary["diverged"] = status == "diverged"
        curve_out: dict[str, Sequence[Any]] = {**curve}
        return Result(
            status=status,
            summary=summary,
            curve=curve_out,
            flops=flops,
            n_steps=max(steps, 1),
            diverged_step=div,
        )


# The registry finds a learner by its folder name and takes this attribute.
TASK = HierarchicalTask
