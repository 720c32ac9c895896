"""One interface over the two computations of LD-Minv: the matrix path and the spectral simulator.

A `Batch` holds what a path needs per matrix (the matrices and X0, or the singular values and e0),
so that c0 (and the warm start) is computed once per matrix, not once per training step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tasks.ldminv import matrix_path as MP
from tasks.ldminv import spectral as SP
from tasks.ldminv.data import DataSpec, Source


@dataclass
class Batch:
    base: torch.Tensor  # matrices A (n, d2, d1) or singular values (n, r)
    start: torch.Tensor  # X0 (n, d1, d2) or e0 (n, r)
    c0: torch.Tensor  # (n,)

    def __len__(self) -> int:
        return self.base.shape[0]

    def take(self, idx: torch.Tensor) -> Batch:
        return Batch(self.base[idx], self.start[idx], self.c0[idx])


class Engine:
    def __init__(
        self,
        spec: DataSpec,
        path: str,
        model: str,
        order: int,
        c0_rule: str,
        c0_factor: float,
        k_warm: int,
        dtype: torch.dtype,
        device: str,
    ) -> None:
        self.spec, self.path, self.model, self.order = spec, path, model, order
        self.c0_rule, self.c0_factor, self.k_warm = c0_rule, c0_factor, k_warm
        self.dtype, self.device = dtype, device

    def draw(self, source: Source, n: int) -> Batch:
        if self.path == "matrix":
            a = source.matrices(n).to(self.dtype).to(self.device)
            c0 = MP.c0_matrix(a, self.c0_rule, self.c0_factor)
            return Batch(a, MP.initial_x(a, c0, self.k_warm, self.order), c0)
        sv = source.singular_values(n).to(self.dtype).to(self.device)
        c0 = SP.c0_spectral(sv, self.c0_rule, self.c0_factor)
        return Batch(sv, SP.initial_e(sv, c0, self.k_warm, self.order), c0)

    def losses(self, b: Batch, coeffs: torch.Tensor) -> list[torch.Tensor]:
        """||A X_k A - A||_F^2 per matrix, for k = 1..K, with the learnable coefficients."""
        c = coeffs.to(self.dtype)
        if self.path == "matrix":
            xs = MP.ldminv(b.base, b.start, c, self.model, self.order)
            return [MP.residual_sq(b.base, x) for x in xs]
        es = SP.ldminv_spectral(b.start, c, self.model, self.order)
        return [SP.residual_sq_spectral(b.base, e) for e in es]

    def fixed_losses(self, b: Batch, depth: int) -> list[torch.Tensor]:
        """Fixed D-Minv with no coefficients at all (the paper's baseline)."""
        if self.path == "matrix":
            xs = MP.dminv(b.base, b.start, depth, self.order)
            return [MP.residual_sq(b.base, x) for x in xs]
        es = SP.dminv_spectral(b.start, depth, self.order)
        return [SP.residual_sq_spectral(b.base, e) for e in es]

    def final_state(self, b: Batch, coeffs: torch.Tensor) -> torch.Tensor:
        """X_K (matrix path) or e_K (spectral path)."""
        c = coeffs.to(self.dtype)
        if self.path == "matrix":
            return MP.ldminv(b.base, b.start, c, self.model, self.order)[-1]
        return SP.ldminv_spectral(b.start, c, self.model, self.order)[-1]

    def spectral_layers(self, b: Batch, coeffs: torch.Tensor) -> list[torch.Tensor]:
        assert self.path == "spectral"
        return SP.ldminv_spectral(b.start, coeffs.to(self.dtype), self.model, self.order)


def eq4(layer_losses: list[torch.Tensor]) -> torch.Tensor:
    """The training loss Eq. 4: 1/(2 n K) sum_i sum_k ||A_i X_{k,i} A_i - A_i||_F^2."""
    return torch.stack([v.mean() for v in layer_losses]).sum() / (2 * len(layer_losses))


def over_members(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` mapped over a leading member axis of every argument (tensor or tuple of tensors out).

    Several members go through `torch.func.vmap`; a lone member (every single run, and the last one
    left in a batch) calls `fn` on its own tensors, since vmap's per-op cost would slow it for nothing.
    """
    mapped = torch.func.vmap(fn)

    def call(*args: torch.Tensor) -> Any:
        if args[0].shape[0] != 1:
            return mapped(*args)
        out = fn(*(a[0] for a in args))
        return tuple(t.unsqueeze(0) for t in out) if isinstance(out, tuple) else out.unsqueeze(0)

    return call
