"""Parameters of the l2o_gd task (paper 001, spec /work/shared/specs/001_l2o.md).

A discriminated union on `algo`:
- `l2o`: the Math-L2O learner (Eq. 2-3), trained by full-batch gradient descent ("SGD", sec. 6.3) on F(X_T).
- `gd`: constant-step GD on the same problems, with step c/beta; `step_rule` picks c = 1 (the paper's
  baseline), c = 2 beta/(beta + beta_0) (spec G4) or a given c (what Optuna tunes).
Both share the problem class (N, d, b, data variant, seed) and the horizon T, so a GD run and an L2O
run on the same problem and seed see exactly the same M and Y.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from tasks.base import DType, TaskParams, TaskSpec, fills_defaults, tagged_union

Data = Literal["gauss", "colnorm", "gt"]
StepRule = Literal["inv_beta", "two_over", "given"]


class _Problem(TaskParams):
    """The problem class of sec. 6.1 and the unrolled horizon."""

    d: int = Field(512, ge=2, le=65_536, description="length of each x_i (columns of M_i); the paper's main run: 512")
    b: int = Field(400, ge=1, le=65_536, description="length of each y_i (rows of M_i), b < d; main run: 400")
    n_problems: int = Field(10, ge=1, le=100_000, description="N, the number of least-squares instances; main run: 10")
    data: Data = Field(
        "gauss",
        description="gauss: M_i, y_i i.i.d. N(0,1) (spec default); colnorm: Gaussian M_i with unit-norm columns "
        "(Liu et al.'s code), y_i ~ N(0,1); gt: Gaussian M_i, y_i = M_i x_gt with x_gt ~ N(0,1)",
    )
    data_seed: int | None = Field(None, description="seed of M and Y (None: seed)")
    T: int = Field(100, ge=1, le=100_000, description="unrolled GD iterations (the paper: 100)")
    dtype: DType = Field(
        "float64",
        description="precision of the unrolled trajectories and the net; improvement ratios are always "
        "evaluated in float64 (spec G14)",
    )

    @model_validator(mode="after")
    def _underdetermined(self) -> _Problem:
        if self.b >= self.d:
            raise ValueError(f"the problems are under-determined: need b < d, got b={self.b}, d={self.d}")
        return self


class L2OParams(_Problem):
    """Math-L2O (sec. 6): P_t = 2 sigmoid(W_L ReLU(... ReLU(W_1 [x, g]))) per coordinate, no biases."""

    algo: Literal["l2o"] = Field("l2o", description="the Math-L2O learner trained on F(X_T)")
    depth: int = Field(3, ge=2, le=8, description="L, the number of layers (the paper: 3)")
    n1: int | None = Field(
        None,
        ge=1,
        le=65_536,
        description="width of the hidden layers before the last one (unstated in the paper, spec G1; "
        "None: n2 when depth >= 3; must be None when depth = 2)",
    )
    n2: int = Field(5120, ge=1, le=65_536, description="width of the last hidden layer n_{L-1} (the paper: N*d = 5120)")
    e: float = Field(100.0, gt=0.0, le=1e6, description="expansion: hidden weights are orthogonal times e (sec. 5)")
    # The bound is wide because the effective step is lr e^{2(L-1)}: holding it fixed at a small e (spec G6's
    # fixed-eta variant, e = 0.1 at L = 4) takes lr = 1e7.
    lr: float = Field(
        1e-7, gt=0.0, le=1e8, description="learning rate eta of full-batch gradient descent (the paper: 1e-7)"
    )
    epochs: int = Field(
        50_000, ge=0, le=10_000_000, description="training steps k, one per full batch (the paper: 50000)"
    )
    detach: bool = Field(
        True,
        description="True: the MLP's inputs are detached (Liu et al.'s gradient pruning, the paper); "
        "False: the true gradient of F(X_T) including dP/dX (Eq. 27)",
    )
    init_seed: int | None = Field(None, description="seed of the orthogonal hidden weights (None: seed)")
    log_every: int = Field(
        10, ge=1, le=10_000_000, description="curve cadence in epochs (epoch 0 and the last are always logged)"
    )
    traj_every: int = Field(
        0,
        ge=0,
        le=10_000_000,
        description="also store the trajectory F(X_t), t=1..T, every this many epochs (0: at epochs 0, 1, 2, 5, "
        "10, 20, 50, ... and the last)",
    )
    diag_every: int = Field(
        0,
        ge=0,
        le=10_000_000,
        description="spec section 4 diagnostics (SVD of G_{L-1,T}, norms, Lemma ratios) every this many epochs "
        "(0: at epoch 0 and the last only)",
    )
    svd: bool = Field(True, description="compute alpha_0 = sigma_min(G_{L-1,T}) and its rank (an n2 x N*d SVD)")
    best_c: bool = Field(True, description="also scan constant GD steps c/beta, c in [0.5, 2.2], for the best one")

    @fills_defaults
    def _fill_n1(cls, out: dict[str, Any]) -> None:
        """n1 defaults to n2 (spec G1's faithful guess) when there is a layer that uses it."""
        depth = out.get("depth", 3)
        if out.get("n1") is None and isinstance(depth, int) and depth >= 3:
            out["n1"] = out.get("n2", cls.model_fields["n2"].default)

    @model_validator(mode="after")
    def _check_n1(self) -> L2OParams:
        if self.depth == 2 and self.n1 is not None:
            raise ValueError("n1 is only used when depth >= 3 (depth 2 has one hidden layer, of width n2)")
        return self

    def widths(self) -> list[int]:
        """[n_0 = 2, n_1, ..., n_{L-1}, n_L = 1]."""
        inner = [self.n1 or self.n2] * (self.depth - 2)
        return [2, *inner, self.n2, 1]


class GDParams(_Problem):
    """Gradient descent X_t = X_{t-1} - (c/beta) grad F(X_{t-1}), X_0 = 0, with one global beta."""

    algo: Literal["gd"] = Field("gd", description="constant-step gradient descent (the baselines)")
    step_rule: StepRule = Field(
        "inv_beta",
        description="inv_beta: c = 1 (the paper's GD); two_over: c = 2 beta/(beta + beta_0), the classical "
        "2/(L + mu) (spec G4); given: c as set (tuned by Optuna). Defaults to given when c is set",
    )
    c: float | None = Field(None, gt=0.0, le=10.0, description="step multiplier, step = c/beta (given only)")
    log_every: int = Field(1, ge=1, le=100_000, description="curve cadence in iterations t")

    @model_validator(mode="before")
    @classmethod
    def _given_when_c(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("step_rule") is None and data.get("c") is not None:
            return {**data, "step_rule": "given"}
        return data

    @model_validator(mode="after")
    def _check_c(self) -> GDParams:
        if self.step_rule == "given" and self.c is None:
            raise ValueError("step_rule 'given' needs c")
        if self.step_rule != "given" and self.c is not None:
            raise ValueError("c is only used when step_rule is 'given'")
        return self


L2OGDParams = tagged_union("algo", "l2o", L2OParams, GDParams)
AnyParams = L2OParams | GDParams

# What the driver needs to plan a grid of this learner (tasks.registry.get_spec): no torch imported.
# Version 2: alpha_0 of a rank-deficient G (spec G14) is 0, not the rounding-level singular value that
# differed between CPU and GPU; alpha_ratio_min and Theorem 4.7's margins follow.
SPEC = TaskSpec(name="l2o_gd", version="2", Params=L2OGDParams)
