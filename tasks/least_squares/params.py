"""least_squares params: constant or optimal step, validated with pydantic alone (no torch), so that
the driver plans a grid without the learner's numerical code."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tasks.base import DType, TaskParams, TaskSpec, tagged_union


class CommonParams(TaskParams):
    """The params every step rule shares."""

    d_in: int = Field(20, ge=1, le=4096, description="input dimension (rows of X)")
    d_out: int = Field(5, ge=1, le=4096, description="output dimension (rows of Y)")
    m: int = Field(100, ge=1, le=1_000_000, description="number of samples (columns of X)")
    cond: float | None = Field(
        None, ge=1.0, description="if set, X's singular values are spread geometrically to give this cond(X)"
    )
    n_iters: int = Field(200, ge=1, le=10_000_000, description="GD iterations")
    tol: float = Field(1e-10, gt=0.0, description="stop when err <= tol")
    log_every: int = Field(1, ge=1, description="curve cadence in iterations")
    dtype: DType = "float64"


class ConstStep(CommonParams):
    lr_rule: Literal["const"] = Field("const", description="const: the step is lr")
    lr: float = Field(0.05, gt=0.0, description="constant step size")


class OptimalStep(CommonParams):
    lr_rule: Literal["optimal"] = Field(
        "optimal", description="optimal: the step is 2/(lambda_max+lambda_min) of X X^T"
    )


# lr_rule picks the branch and defaults to "const", so `lr` is rejected with the optimal rule.
LeastSquaresParams = tagged_union("lr_rule", "const", ConstStep, OptimalStep)

# What the driver needs to plan a grid of this learner (tasks.registry.get_spec): no torch imported.
# version 2: computes with a leading config axis (batched kernels: last-bit changes)
SPEC = TaskSpec(name="least_squares", version="2", Params=LeastSquaresParams)
