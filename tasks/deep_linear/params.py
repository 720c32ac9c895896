"""Parameters of the deep_linear task (paper 002, Shin): one pydantic model per algorithm.

The three models share `DeepLinearBase` (data, architecture, initialisation, budget, logging) and
are joined by a discriminated union on `algo`, so a parameter that an algorithm does not use is an
error instead of a new run id. Every field is a scalar or a list of scalars (one Parquet column
each); a name has the same type in every variant.

Width representation: `width` (one int for every hidden layer, default max(d_in, d_out)) or
`widths` (the full list n_1..n_{L-1}, length L-1), never both.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from tasks.base import DType, TaskParams, TaskSpec

# Real data sets: (d_in, d_out, available samples). Their dimensions are fixed by the data, so the
# model fills them in when left out and rejects any other value.
REAL_DIMS: dict[str, tuple[int, int, int]] = {
    "uci_ethanol": (128, 1, 2565),
    "mnist": (784, 10, 60000),
}
SYNTHETIC = ("gauss_small", "gauss_bigcond", "gauss_teacher")

DataName = Literal["gauss_small", "gauss_bigcond", "gauss_teacher", "uci_ethanol", "mnist"]
InitName = Literal["orth_identity", "orthogonal", "identity", "balanced", "random"]
Order = Literal["desc", "asc"]


class DeepLinearBase(TaskParams):
    # --- data ------------------------------------------------------------------------------------
    data: DataName = Field(
        "gauss_small",
        description=(
            "gauss_small: X ~ N(0, 1/d_in), Y ~ U(-1, 2) (Sec. 4.1; cond(X) about 2.6 at 128x600). "
            "gauss_bigcond: the same X with its singular values replaced by 1e-5 + U(0,1) "
            "(Sec. 4.1.2; cond about 236 but very seed-dependent, see cond_target). "
            "gauss_teacher: same X, Y = T X with T ~ N(0,1) (not in the paper; L(W*) = 0, used for "
            "the BCSGD floor check). uci_ethanol / mnist: local files, see data_path."
        ),
    )
    d_in: int = Field(128, ge=1, le=100_000, description="input dimension n_0 (fixed by the data for real data)")
    d_out: int = Field(10, ge=1, le=100_000, description="output dimension n_L (fixed by the data for real data)")
    m: int = Field(
        600,
        ge=1,
        le=10_000_000,
        description="number of samples; for real data the first m rows of the file (default: all)",
    )
    data_seed: int | None = Field(None, description="seed of the synthetic data; None: use `seed`")
    cond_target: float | None = Field(
        None,
        gt=1.0,
        description=(
            "gauss_bigcond only: rejection-resample the replaced singular values (fresh U(0,1) draws, "
            "attempt k keyed on (data_seed, k)) until |cond(X) - cond_target| <= cond_rtol * cond_target. "
            "None: keep the first draw (cond varies from about 60 to 5000 across seeds)."
        ),
    )
    cond_rtol: float = Field(0.05, gt=0.0, lt=1.0, description="relative tolerance of cond_target")
    data_path: str | None = Field(
        None,
        description=(
            "real data only: directory holding the raw files (uci_ethanol: batch1.dat..batch10.dat; "
            "mnist: train-images-idx3-ubyte and train-labels-idx1-ubyte, .gz or decompressed). None: data/uci_gas or "
            "data/mnist under the working directory. Never downloaded; see docs/deep_linear.md."
        ),
    )
    pixel_scale: Literal["unit", "raw"] = Field(
        "unit", description="mnist only: unit divides pixels by 255 (default), raw keeps 0..255"
    )
    # --- architecture and initialisation ---------------------------------------------------------
    L: int = Field(1, ge=1, le=10_000, description="depth (number of weight matrices)")
    width: int | None = Field(
        None, ge=1, le=100_000, description="width of every hidden layer; None: max(d_in, d_out) (paper default)"
    )
    widths: list[int] | None = Field(
        None, description="full override of the hidden widths n_1..n_{L-1} (length L-1); excludes `width`"
    )
    init: InitName = Field(
        "orth_identity",
        description=(
            "orth_identity: W_j = padded Haar Q of size min(n_j, n_{j-1}, max(d_in, d_out)) with ones on "
            "the rest of the diagonal; orthogonal: zero-padded Haar Q of size min(n_j, n_{j-1}); identity: "
            "eye(n_j, n_{j-1}); balanced: SVD split of a random d_out x d_in matrix (Arora et al.); random: "
            "N(0, random_std^2). Q for layer j comes from a generator keyed on (init_seed, j). Zero init is "
            "not offered (every gradient vanishes)."
        ),
    )
    init_seed: int | None = Field(None, description="seed of the initial weights; None: use `seed`")
    balanced_std: float | None = Field(
        None, gt=0.0, description="balanced only: std of the random end-to-end matrix; None: 1/sqrt(d_in)"
    )
    random_std: float | None = Field(
        None, gt=0.0, description="random only: std of every weight entry; None: 1/sqrt(n_{j-1}) (fan-in)"
    )
    # --- budget, numerics and logging ------------------------------------------------------------
    n_iters: int = Field(
        200, ge=1, le=100_000_000, description="iterations (BCGD/BCSGD: one layer each; GD: all layers each)"
    )
    tol: float = Field(1e-10, gt=0.0, description="error threshold for iters/sweeps/flops_to_tol")
    stop_at_tol: bool = Field(False, description="stop at the first iteration with err <= tol")
    log_every: int = Field(
        1, ge=1, description="curve cadence in iterations (plus step 0, the tol crossing and the last)"
    )
    dtype: DType = Field("float64", description="float64 (spec G3: the 1e-10 floor needs it) or float32")
    grad_scale: Literal[1, 2] = Field(
        1,
        description=(
            "1: gradient of the halved loss (the paper's convention, required for eq. 3.4). 2: gradient of "
            "the un-halved loss, kept to demonstrate spec G1/G2 (doubles every step)."
        ),
    )

    @model_validator(mode="before")
    @classmethod
    def _real_data_dims(cls, data: Any) -> Any:
        # Real data fixes d_in/d_out/m; fill them in so that a minimal config stays short and the
        # stored params say what was run.
        if isinstance(data, dict) and data.get("data") in REAL_DIMS:
            d_in, d_out, m = REAL_DIMS[data["data"]]
            data = {"d_in": d_in, "d_out": d_out, "m": m, **data}
        return data

    @model_validator(mode="after")
    def _check_base(self) -> DeepLinearBase:
        # Checks look at values, not at model_fields_set, so that a dumped model (which lists every
        # field) validates again to the same model.
        if self.data in REAL_DIMS:
            d_in, d_out, m_max = REAL_DIMS[self.data]
            if (self.d_in, self.d_out) != (d_in, d_out):
                raise ValueError(f"{self.data} has d_in={d_in}, d_out={d_out}; got {self.d_in}, {self.d_out}")
            if self.m > m_max:
                raise ValueError(f"{self.data} has {m_max} samples; m={self.m}")
            if self.data_seed is not None:
                raise ValueError("data_seed is only used by synthetic data")
        elif self.data_path is not None:
            raise ValueError("data_path is only used with data='uci_ethanol' or 'mnist'")
        if self.pixel_scale != "unit" and self.data != "mnist":
            raise ValueError("pixel_scale is only used with data='mnist'")
        if self.cond_target is not None and self.data != "gauss_bigcond":
            raise ValueError("cond_target is only used with data='gauss_bigcond'")
        if self.cond_rtol != 0.05 and self.cond_target is None:
            raise ValueError("cond_rtol is only used with cond_target")
        if self.width is not None and self.widths is not None:
            raise ValueError("give either width (all hidden layers) or widths (full list), not both")
        if self.widths is not None:
            if len(self.widths) != self.L - 1:
                raise ValueError(f"widths must list the L-1 = {self.L - 1} hidden widths; got {len(self.widths)}")
            if any(w < 1 for w in self.widths):
                raise ValueError("every width must be >= 1")
        if self.L == 1 and self.width is not None:
            raise ValueError("width has no meaning for L=1 (no hidden layer)")
        if self.balanced_std is not None and self.init != "balanced":
            raise ValueError("balanced_std is only used with init='balanced'")
        if self.random_std is not None and self.init != "random":
            raise ValueError("random_std is only used with init='random'")
        if self.init == "balanced" and min(self.layer_widths()) < min(self.d_in, self.d_out):
            raise ValueError(
                "balanced init needs every width >= min(d_in, d_out) (it pads a rank-min(d_in,d_out) split)"
            )
        return self

    # --- derived quantities (not params) ---------------------------------------------------------
    def layer_widths(self) -> list[int]:
        """[n_0, n_1, ..., n_L] with n_0 = d_in, n_L = d_out."""
        if self.widths is not None:
            hidden = list(self.widths)
        else:
            hidden = [self.width if self.width is not None else max(self.d_in, self.d_out)] * (self.L - 1)
        return [self.d_in, *hidden, self.d_out]

    def data_seed_eff(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed

    def init_seed_eff(self) -> int:
        return self.seed if self.init_seed is None else self.init_seed


class BCGDParams(DeepLinearBase):
    """Layer-wise block coordinate gradient descent (eq. 2.4), one layer per iteration."""

    algo: Literal["bcgd"] = Field(description="bcgd: one layer per iteration, cyclic order")
    order: Order = Field("desc", description="desc: W_L..W_1 per sweep (paper default); asc: W_1..W_L")
    lr_rule: Literal["opt", "thm32", "const"] = Field(
        "opt",
        description=(
            "opt: exact line search, eq. 3.4 (L2) or eq. 3.11 (L4); thm32: eta_bar/(||A||^2 ||C||^2), "
            "eq. 3.2; const: lr"
        ),
    )
    lr: float | None = Field(None, gt=0.0, description="constant step (lr_rule='const' only)")
    eta_bar: float | None = Field(
        None, gt=0.0, lt=2.0, description="eta_bar in (0,2) of eq. 3.2 (lr_rule='thm32' only)"
    )
    loss: Literal["l2", "l4"] = Field("l2", description="l2: (z-b)^2/2 (all theory); l4: (z-b)^4/4 (Fig. 7 right)")
    l4_backtrack: bool = Field(
        False, description="l4 only: halve the step until the loss does not rise (spec G7 safeguard, off = faithful)"
    )
    check_thm32: bool = Field(
        False,
        description=(
            "l2 only: at every update compute the Thm 3.2 contraction gamma^2 from the spectra of A and C "
            "and record the worst ratio (err_new/err_old)/gamma^2 (costs SVDs per update)"
        ),
    )

    @model_validator(mode="after")
    def _check_bcgd(self) -> BCGDParams:
        if (self.lr is not None) != (self.lr_rule == "const"):
            raise ValueError("lr is required with lr_rule='const' and rejected otherwise")
        if (self.eta_bar is not None) != (self.lr_rule == "thm32"):
            raise ValueError("eta_bar is required with lr_rule='thm32' and rejected otherwise")
        if self.loss == "l4" and self.lr_rule == "thm32":
            raise ValueError("lr_rule='thm32' is the L2 theory rule; use 'opt' (eq. 3.11) or 'const' with loss='l4'")
        if self.l4_backtrack and self.loss != "l4":
            raise ValueError("l4_backtrack is only used with loss='l4'")
        if self.check_thm32 and (self.loss != "l2" or self.lr_rule == "const"):
            raise ValueError("check_thm32 needs loss='l2' and lr_rule 'opt' or 'thm32'")
        return self


class GDParams(DeepLinearBase):
    """Full-batch gradient descent: every layer updated from the same weights (end-to-end backprop)."""

    algo: Literal["gd"] = Field(description="gd: all layers per iteration, constant step")
    lr_rule: Literal["const", "du_hu"] = Field(
        "const",
        description="const: lr (trial and error in the paper); du_hu: d_out / (3 L ||X||^2) (diverges, Sec. 4.1.3)",
    )
    lr: float | None = Field(None, gt=0.0, description="constant step (lr_rule='const' only)")

    @model_validator(mode="after")
    def _check_gd(self) -> GDParams:
        if (self.lr is not None) != (self.lr_rule == "const"):
            raise ValueError("lr is required with lr_rule='const' and rejected with lr_rule='du_hu'")
        return self


class BCSGDParams(DeepLinearBase):
    """Block coordinate SGD (eq. 3.12-3.14): one layer and one sample per iteration."""

    algo: Literal["bcsgd"] = Field(description="bcsgd: one layer and one sampled datum per iteration")
    order: Order = Field("desc", description="desc: W_L..W_1 per sweep; asc: W_1..W_L")
    eta_bar: float | None = Field(0.5, gt=0.0, lt=2.0, description="eta_bar in (0,2) of eq. 3.14")
    tail_frac: float = Field(
        0.25, gt=0.0, le=1.0, description="err_tail averages err over this last fraction of iterations"
    )

    @model_validator(mode="after")
    def _check_bcsgd(self) -> BCSGDParams:
        if self.eta_bar is None:
            raise ValueError("bcsgd needs eta_bar in (0, 2)")
        return self


DeepLinearParams = Annotated[BCGDParams | GDParams | BCSGDParams, Field(discriminator="algo")]
AnyParams = BCGDParams | GDParams | BCSGDParams

# What the driver needs to plan a grid of this learner (tasks.registry.get_spec): no torch imported.
# version 2: GD and L2 BCGD compute with a leading config axis (last-bit changes)
# version 3: their small float64 stacks are multiplied by numpy on the CPU (tasks.deep_linear.flops.stack_product)
# version 4: thm32_violations is null where Thm 3.2 is not checked (was the sentinel -1, issue 45)
SPEC = TaskSpec(name="deep_linear", version="4", Params=DeepLinearParams)
