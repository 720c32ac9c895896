"""Parameters of the hierarchical task (paper 004, Allen-Zhu & Li, backward feature correction).

One discriminated union on `learner`:
  wk        the re-parameterised learner of spec 2.2 (K-path feeds deeper layers, W-path gives the output)
            trained by the epoch-staged recipe of spec 2.9 under a protocol (joint, layerwise, window,
            all_from_start);
  densenet  the plain quadratic DenseNet of spec 2.1 (activation z^2, z + 0.1 z^2 or ReLU; claim C12);
  kernel    ridge baselines of claim C6: polynomial kernel, the NTK of a 2-layer ReLU net, ReLU random
            features; the ridge is picked on the validation split.
Every learner shares the target and data fields (spec 1.7 and 3.10), so protocols and learners are
compared paired on the same `target_seed` / `data_seed`.

Resolved defaults: `k` (None -> the first L-1 of (6, 4, 3, 2), spec 3.10) and `window` are filled
before validation, so `{}` and the explicit value are the same run id and the stored column holds the
value used.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any, Literal

from pydantic import Field, model_validator

from tasks.base import DType, TaskParams, TaskSpec, fills_defaults, renamed, tagged_union

DEFAULT_K = (6, 4, 3, 2)
MAX_L = 5

Dist = Literal["uniform", "gaussian"]
JType = Literal["resnet", "input"]
Protocol = Literal["joint", "layerwise", "window", "all_from_start"]
Optim = Literal["adam", "sgd"]
OptState = Literal["reset", "keep"]
Activation = Literal["square", "quad_lin", "relu"]
KernelName = Literal["poly", "ntk", "rf"]


class TargetFields(TaskParams):
    """The hierarchical target of spec 1.7 and its data splits (shared by every learner)."""

    d: int = Field(20, ge=2, le=512, description="input dimension")
    L: int = Field(3, ge=2, le=MAX_L, description="number of target layers (degree 2^L)")
    # Named `k` until issue 45 (a list beside ldminv's int `K` and linear_resnet's int `k` broke whole-store
    # reads): `k` is still taken on input, and run ids still hash it as `k` (serialization_alias), so every
    # stored run keeps its id.
    target_widths: list[int] | None = Field(
        None,
        serialization_alias="k",
        description="target widths k_2..k_L (length L-1, non-increasing, k_2 <= d); None: (6,4,3,2)[:L-1]; old name: k",
    )
    gamma: float = Field(0.3, gt=0.0, le=10.0, description="information gap: alpha_l = gamma^(l-2)")
    j_type: JType = Field(
        "resnet",
        description="skip graph: resnet J_2={0,1}, J_l={l-1,l-3}; input J_2={0,1}, J_3={0,2}, J_l={l-1,0} (l>=4)",
    )
    kappa: float = Field(1.0, ge=1.0, le=100.0, description="singular values of W*_{l,j} in [1/kappa, kappa]")
    dist: Dist = Field(
        "uniform",
        description="inputs: uniform on [-sqrt3, sqrt3]^d (unit variance; flagged deviation, spec 6.3) or N(0, I)",
    )
    n_mc: int = Field(200_000, ge=1000, le=2_000_000, description="Monte-Carlo samples of the target normalisation")
    n_train: int = Field(20_000, ge=10, le=200_000, description="training samples")
    n_val: int = Field(2000, ge=10, le=200_000, description="validation samples (model selection, tuning)")
    n_test: int = Field(20_000, ge=10, le=200_000, description="test samples")
    target_seed: int | None = Field(None, description="seed of W* and of the normalisation samples (None: seed)")
    data_seed: int | None = Field(None, description="seed of the train/val/test inputs (None: seed)")
    dtype: DType = Field("float64", description="training precision (target and normalisation always float64)")

    @model_validator(mode="before")
    @classmethod
    def _fill_k(cls, data: Any) -> Any:
        data = renamed(data, "k", "target_widths")
        if isinstance(data, dict) and data.get("target_widths") is None:
            try:
                depth = int(data.get("L", cls.model_fields["L"].default))
            except (TypeError, ValueError):
                return data
            if 2 <= depth <= MAX_L:
                return {**data, "target_widths": list(DEFAULT_K[: depth - 1])}
        return data

    @model_validator(mode="after")
    def _check_target(self) -> TargetFields:
        ks = self.widths()
        if len(ks) != self.L - 1:
            raise ValueError(f"k has {len(ks)} entries, needs L-1 = {self.L - 1}")
        if any(kk < 1 for kk in ks) or ks[0] > self.d:
            raise ValueError(f"k must be >= 1 with k_2 <= d = {self.d}")
        if any(a < b for a, b in itertools.pairwise(ks)):
            raise ValueError(f"k must be non-increasing (spec 1.3 monotone), got {ks}")
        return self

    @property
    def k(self) -> list[int] | None:
        """The target widths under their old name (the spec's k_l)."""
        return self.target_widths

    def widths(self) -> list[int]:
        assert self.target_widths is not None
        return list(self.target_widths)

    def tseed(self) -> int:
        return self.seed if self.target_seed is None else self.target_seed

    def dseed(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed


class TrainFields(TargetFields):
    """Optimiser and budget fields of the trained networks (wk and densenet)."""

    m: int = Field(64, ge=1, le=4096, description="width of the W-path (wk) or of every layer (densenet)")
    init_seed: int | None = Field(None, description="seed of R, W, K (and minibatch order); None: seed")
    optimizer: Optim = Field("adam", description="adam (the prototype's; a deviation) or sgd with momentum")
    lr: float = Field(3e-3, gt=0.0, le=100.0, description="learning rate of the stages")
    final_lr: float = Field(1e-3, gt=0.0, le=100.0, description="learning rate of the final phase")
    momentum: float | None = Field(
        None, ge=0.0, lt=1.0, description="sgd only: heavy-ball momentum (default 0.9, the prototype's)"
    )
    batch: int = Field(128, ge=1, le=200_000, description="minibatch size")
    clip: float | None = Field(None, gt=0.0, description="per-tensor gradient-norm clip (None: no clipping)")
    wd: float = Field(1e-5, ge=0.0, le=1.0, description="lam6: weight decay ||K||^2 + ||W||^2 in the objective")
    w_init: float = Field(0.05, ge=0.0, le=10.0, description="W_{l,j} ~ N(0, w_init^2 / q_j) (densenet: u_l too)")
    final_epochs: int = Field(20, ge=0, le=10_000, description="epochs of the final phase")
    log_every: int = Field(5, ge=1, le=10_000, description="curve cadence in epochs (plus every stage end)")

    @model_validator(mode="before")
    @classmethod
    def _fill_momentum(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("optimizer") == "sgd" and data.get("momentum") is None:
            return {**data, "momentum": 0.9}
        return data

    @model_validator(mode="after")
    def _check_batch(self) -> TrainFields:
        if self.momentum is not None and self.optimizer != "sgd":
            raise ValueError("momentum is only used by optimizer 'sgd'")
        if self.batch > self.n_train:
            raise ValueError(f"batch={self.batch} must be <= n_train={self.n_train}")
        return self

    def iseed(self) -> int:
        return self.seed if self.init_seed is None else self.init_seed


class WKParams(TrainFields):
    """The learner of spec 2.2 under the staged recipe of spec 2.9."""

    learner: Literal["wk"] = Field("wk", description="re-parameterised K/W learner (spec 2.2)")
    protocol: Protocol = Field(
        "joint",
        description="joint: Algorithm-1 staging by epochs, lower layers trainable; layerwise: lower layers "
        "frozen; window: at stage l only layers l-window..l train; all_from_start: no staging, K random",
    )
    window: int | None = Field(None, ge=0, le=MAX_L, description="window only: how many lower layers train")
    epochs_per_stage: int = Field(10, ge=0, le=10_000, description="epochs of each stage l^Delta and l^Nabla")
    k_start: Literal["distill", "random"] | None = Field(
        None,
        description="how K_l starts: distill = INITIAL-DISTILL (SVD of W_{l,<|}^T W_{l,l-1}) at the end of "
        "l^Delta; random = N(0, k_init^2/q) at step 0. Default distill, random for all_from_start",
    )
    k_init: float = Field(0.05, ge=0.0, le=10.0, description="std scale of a random K start (K ~ N(0, k_init^2/q))")
    lam_mult: float = Field(0.1, ge=0.0, le=1e4, description="lam3..5 = lam_mult * ratio * alpha_eff_l^2")
    lam_ratios: list[float] = Field(
        [1.0, 1.0, 1.0], description="(lam3, lam4, lam5) relative weights (paper: lam3 > lam4 > lam5)"
    )
    opt_state: OptState = Field(
        "reset",
        description="the optimiser's state (Adam moments, SGD momentum) across phases: reset = a fresh "
        "optimiser at every stage and the final phase; keep = one optimiser for the whole run (the spec's "
        "prototype), a tensor keeping its state while it is frozen",
    )
    trunc_b: float | None = Field(
        None,
        gt=0.0,
        le=1e6,
        description="train with the truncated inner activation (B tanh(z/B))^2, B = trunc_b x the RMS of "
        "R_j S*_j; None: plain z^2. Evaluation always reports the untruncated F too",
    )

    @fills_defaults
    def _fill_resolved(cls, out: dict[str, Any]) -> None:
        if out.get("k_start") is None:
            out["k_start"] = "random" if out.get("protocol") == "all_from_start" else "distill"

    @model_validator(mode="after")
    def _check_wk(self) -> WKParams:
        if (self.window is not None) != (self.protocol == "window"):
            raise ValueError("window is set exactly when protocol is 'window'")
        if len(self.lam_ratios) != 3 or any(r < 0 for r in self.lam_ratios):
            raise ValueError("lam_ratios needs three non-negative numbers (lam3, lam4, lam5)")
        if self.protocol == "all_from_start" and self.k_start != "random":
            raise ValueError("all_from_start has no stage to distill at: k_start must be 'random'")
        return self


class DenseNetParams(TrainFields):
    """Plain DenseNet of spec 2.1, every layer trainable from the start (claim C12)."""

    learner: Literal["densenet"] = Field("densenet", description="plain DenseNet G_l = sigma(sum_j W_{l,j} G_j)")
    activation: Activation = Field("square", description="sigma: square z^2, quad_lin z + 0.1 z^2, relu")
    epochs: int = Field(60, ge=1, le=10_000, description="training epochs (then final_epochs at final_lr)")


class KernelParams(TargetFields):
    """Kernel / random-feature ridge regression baselines (claim C6)."""

    learner: Literal["kernel"] = Field("kernel", description="ridge regression baseline")
    kernel: KernelName = Field(
        "poly",
        description="poly: (1 + <x,x'>/d)^degree on x; ntk: 2-layer ReLU NTK; rf: ReLU random features",
    )
    degree: int | None = Field(None, ge=1, le=64, description="poly only: kernel degree (default 2^(L-1))")
    n_features: int | None = Field(None, ge=1, le=200_000, description="rf only: number of random features")
    init_seed: int | None = Field(None, description="rf only: seed of the random features (None: seed)")
    ridge_grid: list[float] = Field(
        [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0],
        description="ridge values relative to the mean diagonal of the Gram matrix; best on validation",
    )

    @fills_defaults
    def _fill_resolved(cls, out: dict[str, Any]) -> None:
        kernel = out.get("kernel", "poly")
        if kernel == "poly" and out.get("degree") is None:
            # a bad L is reported by its own field's validation; the default degree just stays unset
            with contextlib.suppress(TypeError, ValueError):
                out["degree"] = 2 ** (int(out.get("L", cls.model_fields["L"].default)) - 1)
        if kernel == "rf" and out.get("n_features") is None:
            out["n_features"] = 4096

    @model_validator(mode="after")
    def _check_kernel(self) -> KernelParams:
        if (self.degree is not None) != (self.kernel == "poly"):
            raise ValueError("degree is set exactly when kernel is 'poly'")
        if (self.n_features is not None) != (self.kernel == "rf"):
            raise ValueError("n_features is set exactly when kernel is 'rf'")
        if self.init_seed is not None and self.kernel != "rf":
            raise ValueError("init_seed is only used by kernel 'rf'")
        if not self.ridge_grid or any(r <= 0 for r in self.ridge_grid):
            raise ValueError("ridge_grid needs positive values")
        return self

    def iseed(self) -> int:
        return self.seed if self.init_seed is None else self.init_seed


HierarchicalParams = tagged_union("learner", "wk", WKParams, DenseNetParams, KernelParams)
AnyParams = WKParams | DenseNetParams | KernelParams

# What the driver needs to plan a grid of this learner (tasks.registry.get_spec): no torch imported.
# Version 2: INITIAL-DISTILL fixes the signs of its SVD (wk_model.initial_distill), so a run no longer
# depends on which LAPACK or cuSOLVER computed it; version 1's distilled runs differ in those signs.
SPEC = TaskSpec(name="hierarchical", version="2", Params=HierarchicalParams)
