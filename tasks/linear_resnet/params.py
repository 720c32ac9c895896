"""Parameters of the linear_resnet task (paper 003, Zou, Long & Gu 2020).

One discriminated union on `algo` (gd | sgd): SGD alone takes a batch size, a sampling scheme and a
batch seed. The other choices (model, transform, step rule) would multiply the union into 24
variants, so their variant-only params are checked by validators instead: a param the chosen
variant does not use is rejected, never silently ignored (it would change the run id, not the run).

Variant-only params default to None in the schema and are filled with their resolved value before
validation (c = 0.5 for the normalised step, a_var = 1/m, b_var = 1/k, alpha = 1, w_var = 1/m).
So `{}` and `{c: 0.5}` validate to the same model, hence the same run id, and the stored column
holds the value actually used.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from tasks.base import DType, TaskParams, TaskSpec, renamed

Model = Literal["resnet", "standard"]
Transform = Literal["gaussian", "identity", "modified_identity"]
StepRule = Literal["normalized", "given", "theory"]
Form = Literal["gram", "direct"]
Target = Literal["neg_identity", "gaussian"]
Sampling = Literal["independent", "reshuffle"]

DEFAULT_C = 0.5  # spec §6.2: c in [0.05, 1] is stable and fast for both models up to L = 50


class LinearResNetCommon(TaskParams):
    """Fields shared by GD and SGD."""

    # --- data (paper §5: X in R^{10x1000} standard normal, Y = -X + 0.1 E) ---
    d: int = Field(10, ge=1, le=4096, description="input dimension (rows of X)")
    # Named `k` until issue 45 (beside ldminv's `K` and hierarchical's list `k`, it broke whole-store reads):
    # `k` is still taken on input, and run ids still hash it as `k` (serialization_alias), so every stored
    # run keeps its id; `p.k` still reads it.
    d_out: int = Field(
        10, ge=1, le=4096, serialization_alias="k", description="output dimension (rows of Y); old name: k"
    )
    n: int = Field(1000, ge=1, le=10_000_000, description="number of samples (columns of X)")
    target: Target = Field(
        "neg_identity",
        description="Phi in Y = Phi X + noise E: neg_identity = -I (the paper's, needs d == k), "
        "gaussian = N(0, 1/d) entries",
    )
    noise: float = Field(0.1, ge=0.0, le=1e6, description="scale of the Gaussian noise E in Y (0 gives L* = 0)")
    kappa: float | None = Field(
        None,
        ge=1.0,
        le=1e12,
        description="None: X i.i.d. N(0,1) (the paper). Set: X = U diag(sqrt(n*lambda)) V^T with lambda "
        "geometric in [1, kappa], so ||X||_2^2 / sigma_r^2(X) = kappa exactly",
    )
    data_seed: int | None = Field(None, description="seed of X, Phi and E (None: seed)")
    # --- model ---
    model: Model = Field(
        "resnet",
        description="resnet: B (I+W_L)...(I+W_1) A with zero-initialised W; standard: B W_L...W_1 A with "
        "Gaussian W (the Du & Hu baseline of Fig. 1c-d)",
    )
    m: int = Field(40, ge=1, le=100_000, description="hidden width (m >= max(d, k); >= d + k for modified identity)")
    depth: int = Field(10, ge=1, le=10_000, description="number of hidden layers L")
    transform: Transform = Field("gaussian", description="fixed input/output transforms A (m x d), B (k x m)")
    a_var: float | None = Field(None, gt=0.0, description="variance of A's entries (gaussian only; default 1/m)")
    b_var: float | None = Field(None, gt=0.0, description="variance of B's entries (gaussian only; default 1/k)")
    alpha: float | None = Field(None, gt=0.0, description="nonzero entry of B (modified_identity only; default 1)")
    ab_seed: int | None = Field(None, description="seed of the Gaussian A, B (None: seed)")
    w_var: float | None = Field(
        None, ge=0.0, description="variance of the initial hidden W_l (standard only; default 1/m, Du & Hu)"
    )
    init_seed: int | None = Field(None, description="seed of the initial hidden W_l (standard only; None: seed)")
    # --- step size ---
    step_rule: StepRule = Field(
        "normalized",
        description="normalized: eta = c / (L ||A||^2 ||B||^2 ||X||^2); given: eta; theory: the step of the "
        "proof of Thm 3.1, 1/(2 L lA lB ||X|| (sqrt(e L0) + 0.5 e lA lB ||X||)). Defaults to given when eta is set",
    )
    c: float | None = Field(None, gt=0.0, le=1e6, description="step constant (normalized only; default 0.5)")
    eta: float | None = Field(None, gt=0.0, description="step size (given only)")
    # --- run ---
    n_iters: int = Field(2000, ge=1, le=10_000_000, description="number of iterations (updates)")
    log_every: int = Field(10, ge=1, description="curve cadence in iterations (also SGD's full-loss evaluations)")
    stop_rel: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="stop once (loss - L*) / (L0 - L*) <= stop_rel (0: run all n_iters; SGD checks at logged steps)",
    )
    form: Form = Field(
        "gram",
        description="gram: gradients from X X^T and Y X^T (exact; for SGD the batch's Gram matrices); "
        "direct: activations of all samples (or the batch)",
    )
    dtype: DType = Field("float64", description="training precision (data constants and L* always in float64)")

    @model_validator(mode="before")
    @classmethod
    def _fill_resolved_defaults(cls, data: Any) -> Any:
        """Put the value a variant uses into its variant-only fields (see module docstring)."""
        data = renamed(data, "k", "d_out")
        if not isinstance(data, dict):
            return data
        out = dict(data)
        if out.get("step_rule") is None:
            out["step_rule"] = "given" if out.get("eta") is not None else "normalized"
        if out["step_rule"] == "normalized" and out.get("c") is None:
            out["c"] = DEFAULT_C
        m = _as_int(out.get("m", cls.model_fields["m"].default))
        k = _as_int(out.get("d_out", cls.model_fields["d_out"].default))
        transform = out.get("transform", cls.model_fields["transform"].default)
        if transform == "gaussian":
            if out.get("a_var") is None and m:
                out["a_var"] = 1.0 / m
            if out.get("b_var") is None and k:
                out["b_var"] = 1.0 / k
        if transform == "modified_identity" and out.get("alpha") is None:
            out["alpha"] = 1.0
        if out.get("model") == "standard" and out.get("w_var") is None and m:
            out["w_var"] = 1.0 / m
        return out

    @property
    def k(self) -> int:
        """The output dimension under its old name (the learner's code and the paper call it k)."""
        return self.d_out

    @model_validator(mode="after")
    def _check_variant(self) -> LinearResNetCommon:
        if self.m < max(self.d, self.k):
            raise ValueError(f"m={self.m} must be >= max(d, k) = {max(self.d, self.k)}")
        if self.transform == "modified_identity" and self.m < self.d + self.k:
            raise ValueError(f"modified_identity needs m >= d + k = {self.d + self.k}, got m={self.m}")
        if self.target == "neg_identity" and self.d != self.k:
            raise ValueError("target neg_identity (Y = -X + noise) needs d == k")
        if self.kappa is not None and self.n < self.d:
            raise ValueError("kappa needs n >= d (X gets d orthonormal right singular vectors)")
        self.only_when("a_var", self.transform == "gaussian", "transform is 'gaussian'")
        self.only_when("b_var", self.transform == "gaussian", "transform is 'gaussian'")
        self.only_when("alpha", self.transform == "modified_identity", "transform is 'modified_identity'")
        self.only_when("w_var", self.model == "standard", "model is 'standard'")
        self.only_when("init_seed", self.model == "standard", "model is 'standard'")
        self.only_when("c", self.step_rule == "normalized", "step_rule is 'normalized'")
        self.only_when("eta", self.step_rule == "given", "step_rule is 'given'")
        if self.step_rule == "given" and self.eta is None:
            raise ValueError("step_rule 'given' needs eta")
        return self


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None  # field validation reports the bad value


class GDParams(LinearResNetCommon):
    """Full-batch gradient descent (Algorithm 1, the paper's only experiment)."""

    algo: Literal["gd"] = Field("gd", description="gradient descent on the full sum loss")


class SGDParams(LinearResNetCommon):
    """Minibatch SGD of Algorithm 1: G = (n/B) sum over the batch, an unbiased sum-loss gradient."""

    algo: Literal["sgd"] = Field("sgd", description="minibatch SGD with the (n/B) scaling")
    batch_size: int = Field(100, ge=1, le=10_000_000, description="minibatch size B (<= n)")
    sampling: Sampling = Field(
        "independent",
        description="independent: each step draws B distinct samples, independently across steps (Algorithm 1); "
        "reshuffle: a fresh permutation per epoch cut into n/B batches (needs B | n)",
    )
    batch_seed: int | None = Field(None, description="seed of the minibatch draws (None: seed)")

    @model_validator(mode="after")
    def _check_batch(self) -> SGDParams:
        if self.batch_size > self.n:
            raise ValueError(f"batch_size={self.batch_size} must be <= n={self.n}")
        if self.sampling == "reshuffle" and self.n % self.batch_size:
            raise ValueError(f"sampling 'reshuffle' needs batch_size to divide n={self.n}")
        return self


def _default_algo(value: Any) -> Any:
    """Minimal configs may leave out the tag: no `algo` means GD."""
    if isinstance(value, dict) and "algo" not in value:
        return {**value, "algo": "gd"}
    return value


LinearResNetParams = Annotated[GDParams | SGDParams, Field(discriminator="algo"), BeforeValidator(_default_algo)]
AnyParams = GDParams | SGDParams

# What the driver needs to plan a grid of this learner (tasks.registry.get_spec): no torch imported.
SPEC = TaskSpec(name="linear_resnet", version="1", Params=LinearResNetParams)
