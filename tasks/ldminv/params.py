"""Parameters of the ldminv task (paper 000): a discriminated union on `algo`.

- `minv`: D-Minv / LD-Minv on batches of matrices: data, depth K, order L, X0 rule, coefficient
  init (or explicit `coeffs`), training (paper SGD or Adam), evaluation. `iters = 0` evaluates the
  initial coefficients only (fixed D-Minv with coeff_init = dminv).
- `dsvd`: D-SVD (Cayley steps on the Stiefel manifold with LD-Minv inside), Table 3.

Variant-only fields default to None and are checked by validators, so a field a configuration does
not use is rejected rather than silently changing the run id.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from tasks.base import DType, TaskParams, TaskSpec, tagged_union

DataName = Literal["gauss", "usv_uniform"]
EntryScale = Literal["std", "var"]
C0Rule = Literal["spec2", "fro"]
CoeffInit = Literal["dminv", "uniform", "perturb", "given"]
Optimizer = Literal["sgd", "adam"]


class DataFields(TaskParams):
    data_seed: int | None = Field(None, description="seed of train and test matrices (None: seed)")
    init_seed: int | None = Field(None, description="seed of the coefficient init and batch order (None: seed)")
    entry_scale: EntryScale = Field(
        "std", description="gauss entries N(0, s^2): std means s = 1/sqrt(d), var means s^2 = 1/sqrt(d) (spec 6.1)"
    )
    n_test: int = Field(100, ge=1, le=100_000, description="number of test matrices (paper: 100)")
    dtype: DType = Field(
        "float64", description="compute precision (paper probably float32; spec: float64 for accuracy)"
    )
    log_every: int = Field(50, ge=1, le=1_000_000, description="curve cadence in training iterations")


class MinvParams(DataFields):
    """LD-Minv (Eq. 3) or its warm-up variant (Eq. 16), trained with the deep-supervised loss Eq. 4."""

    algo: Literal["minv"] = Field("minv", description="learned matrix inverse (Algorithm 1)")
    data: DataName = Field(
        "gauss", description="gauss: Gaussian entries (Fig. 1); usv_uniform: U S V with S ~ U(1/kappa, 1) (Table 2)"
    )
    rows: int = Field(100, ge=1, le=4096, description="d2, rows of A (paper convention A in R^{d2 x d1})")
    cols: int = Field(100, ge=1, le=4096, description="d1, columns of A")
    rank: int | None = Field(None, ge=1, le=4096, description="rank of A (None: full rank min(rows, cols))")
    kappa: float | None = Field(None, ge=1.0, le=1e12, description="usv_uniform only: S ~ U(1/kappa, 1)")
    K: int = Field(4, ge=1, le=200, description="depth: number of layers")
    L: int = Field(4, ge=2, le=64, description="order: terms per layer (2 = Newton-Schulz; the paper uses L >= 4)")
    model: Literal["hyperpower", "warmup"] = Field(
        "hyperpower",
        description="hyperpower: X <- X sum_l C_{k,l} E^l (K*L coefficients); warmup: X <- X (sum_{l<L} E^l + C_k E^L) "
        "(K coefficients, Lemma 2)",
    )
    path: Literal["spectral", "matrix"] = Field(
        "spectral",
        description="spectral: exact singular-value simulator (fast); matrix: the batched matrix computation",
    )
    c0_rule: C0Rule = Field(
        "spec2", description="X0 = A^T/c0 with c0 = c0_factor * ||A||_2^2 (spec2) or ||A||_F^2 (fro)"
    )
    c0_factor: float = Field(
        1.0, gt=0.0, le=1e6, description="multiplier of the c0 rule (Lemma 1 needs c0 > ||A||_2^2/2)"
    )
    k_warm: int = Field(0, ge=0, le=100, description="warm start: fixed D-Minv layers of order L applied to X0 first")
    coeff_init: CoeffInit = Field(
        "dminv",
        description="dminv: the coefficients of fixed D-Minv (1, or 0 for warmup); "
        "uniform: 1 + U(-1,1) init_scale K^-alpha "
        "(Algorithm 1); perturb: 1 + delta * random sign (Prop. 4); given: `coeffs`",
    )
    init_scale: float | None = Field(None, ge=0.0, le=1.0, description="uniform only: scale (default 1/16)")
    init_alpha: float | None = Field(None, ge=0.0, le=4.0, description="uniform only: exponent alpha (default 1)")
    delta: float | None = Field(None, ge=0.0, le=1.0, description="perturb only: |C - 1| = delta")
    coeffs: list[float] | None = Field(
        None, description="given only: coefficients, row-major K x L (hyperpower) or K (warmup)"
    )
    iters: int = Field(1200, ge=0, le=10_000_000, description="training iterations (0: evaluate the init)")
    optimizer: Optimizer = Field("sgd", description="sgd (the paper) or adam (spec 6.5: SGD 1e-4 barely moves C)")
    lr: float = Field(1e-4, gt=0.0, le=1e3, description="learning rate")
    lr_halve_every: int = Field(
        300, ge=0, le=10_000_000, description="halve the learning rate every this many iterations (0: never)"
    )
    batch: int = Field(100, ge=1, le=100_000, description="training batch size")
    n_train: int | None = Field(
        2000, ge=1, le=1_000_000, description="fixed training pool size (None: fresh matrices every iteration)"
    )
    grad_clip: float | None = Field(
        None, gt=0.0, description="clip the coefficient gradient to this norm (None: no clip)"
    )
    project_box: bool = Field(False, description="project C into the theory's box |C - 1| <= 1/8 after each step")
    train_tol: float = Field(
        0.0, ge=0.0, description="record the first iteration whose training loss is <= this (Thm 1)"
    )
    theory_checks: bool = Field(
        False,
        description="matrix path: Lemma 1 and Prop. 1 residuals of fixed D-Minv on the test matrices (float64 pinv)",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("coeff_init") == "uniform":
            out = dict(data)
            out["init_scale"] = 1.0 / 16 if out.get("init_scale") is None else out["init_scale"]
            out["init_alpha"] = 1.0 if out.get("init_alpha") is None else out["init_alpha"]
            return out
        return data

    @model_validator(mode="after")
    def _check(self) -> MinvParams:
        self.only_when("kappa", self.data == "usv_uniform", "data is 'usv_uniform'")
        if self.data == "usv_uniform" and self.kappa is None:
            raise ValueError("data 'usv_uniform' needs kappa")
        if self.rank is not None and self.rank > min(self.rows, self.cols):
            raise ValueError(f"rank={self.rank} exceeds min(rows, cols)={min(self.rows, self.cols)}")
        self.only_when("init_scale", self.coeff_init == "uniform", "coeff_init is 'uniform'")
        self.only_when("init_alpha", self.coeff_init == "uniform", "coeff_init is 'uniform'")
        self.only_when("delta", self.coeff_init == "perturb", "coeff_init is 'perturb'")
        self.only_when("coeffs", self.coeff_init == "given", "coeff_init is 'given'")
        if self.coeff_init == "perturb" and self.delta is None:
            raise ValueError("coeff_init 'perturb' needs delta")
        if self.coeff_init == "given":
            want = self.K * self.L if self.model == "hyperpower" else self.K
            if self.coeffs is None or len(self.coeffs) != want:
                raise ValueError(f"coeff_init 'given' needs coeffs of length {want} (K*L for hyperpower, K for warmup)")
        if self.n_train is not None and self.batch > self.n_train:
            raise ValueError(f"batch={self.batch} exceeds n_train={self.n_train}")
        if self.theory_checks and self.path != "matrix":
            raise ValueError("theory_checks needs path 'matrix'")
        return self


class DsvdParams(DataFields):
    """D-SVD (Sec. 3.1, Eq. 12): K_svd Cayley layers for U and V, each inverting I + tP/2 by LD-Minv."""

    algo: Literal["dsvd"] = Field("dsvd", description="differentiable SVD (Algorithms 2-3)")
    m: int = Field(50, ge=1, le=2048, description="rows of M (paper: 50)")
    n_hat: int = Field(100, ge=1, le=2048, description="columns of M (paper: 100)")
    r: int | None = Field(None, ge=1, le=2048, description="number of singular pairs (None: min(m, n_hat))")
    K_svd: int = Field(5, ge=1, le=500, description="D-SVD layers")
    K_inv: int = Field(6, ge=1, le=100, description="layers of each inner LD-Minv (paper: 6)")
    L_inv: int = Field(4, ge=2, le=64, description="order of each inner LD-Minv (paper: 4)")
    inverse: Literal["ldminv", "exact"] = Field("ldminv", description="inner inverse: LD-Minv or torch.linalg.solve")
    step_rule: Literal["box", "literal"] = Field(
        "box", description="box: minimise the quadratic model on [0, eps] (spec); literal: min{eps, -f'/f''} (Eq. 12)"
    )
    coeff_init: Literal["dminv", "uniform"] = Field(
        "dminv", description="inner coefficients: 1, or 1 + U(-1,1)/16/K_inv"
    )
    iters: int = Field(
        0, ge=0, le=1_000_000, description="outer training iterations T_svd on the offsets (0: untrained)"
    )
    optimizer: Optimizer = Field("sgd", description="optimizer of the step offsets (paper: SGD)")
    lr: float = Field(1e-2, gt=0.0, le=1e3, description="learning rate of the step offsets (paper: 1e-2)")
    inner_iters: int = Field(0, ge=0, le=100_000, description="T_inv: Algorithm 1 steps per layer per outer iteration")
    inner_lr: float = Field(1e-4, gt=0.0, le=1e3, description="learning rate of the inner LD-Minv (paper: 1e-4)")
    batch: int = Field(30, ge=1, le=100_000, description="training batch size (paper: 30)")
    n_train: int = Field(300, ge=1, le=1_000_000, description="fixed training pool size")

    @model_validator(mode="after")
    def _check(self) -> DsvdParams:
        if self.r is not None and self.r > min(self.m, self.n_hat):
            raise ValueError(f"r={self.r} exceeds min(m, n_hat)={min(self.m, self.n_hat)}")
        if self.batch > self.n_train:
            raise ValueError(f"batch={self.batch} exceeds n_train={self.n_train}")
        return self


LdminvParams = tagged_union("algo", "minv", MinvParams, DsvdParams)

# What the driver needs to plan a grid of this learner (tasks.registry.get_spec): no torch imported.
SPEC = TaskSpec(name="ldminv", version="1", Params=LdminvParams)
