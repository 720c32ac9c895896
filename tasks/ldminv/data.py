"""Seeded data of the LD-Minv experiments (paper A.1.1 and Table 2).

gauss: A_ij ~ N(0, s^2) with s = 1/sqrt(d) ("std", default) or s = d^(-1/4) ("var": the variance is
1/sqrt(d)), d = max(rows, cols); rank-deficient: A = G1 G2 / sqrt(rank) with G1 (rows x rank).
usv_uniform: A = U diag(S) V^T, U and V Haar, S_j ~ U(1/kappa, 1) i.i.d. (Table 2); entries beyond
`rank` set to 0.

Matrices are drawn in float64 from generators keyed on (data_seed, split), so the matrix path and the
spectral simulator see the same matrices: the simulator takes their singular values (for usv_uniform,
S directly, from its own generator, so the spectral path never draws U and V).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

import torch

from tasks.common import generator, haar_orthogonal

F64 = torch.float64

# Singular values of Gaussian pools, keyed on (spec, seed, split, n) for a Source's first draw: grids
# run many configs on the same seeded pool, and its SVDs cost more than the spectral training itself.
# The generator state after the draw is cached too, so later draws continue exactly as without it.
# Runs in threads of one process share it (tasks.base.is_thread_safe): the lock makes a look-up and its
# read one step (an eviction in between would raise KeyError) and keeps the eviction's pop single.
_SV_CACHE: dict[tuple[object, ...], tuple[torch.Tensor, torch.Tensor]] = {}
_SV_CACHE_MAX = 16
_SV_LOCK = threading.Lock()


@dataclass(frozen=True)
class DataSpec:
    data: str
    rows: int
    cols: int
    rank: int | None
    entry_scale: str
    kappa: float | None

    @property
    def r(self) -> int:
        return min(self.rows, self.cols)

    @property
    def scale(self) -> float:
        d = max(self.rows, self.cols)
        return 1.0 / math.sqrt(d) if self.entry_scale == "std" else d**-0.25


class Source:
    """A seeded stream of matrices (or of their singular values) for one split."""

    def __init__(self, spec: DataSpec, seed: int, split: str) -> None:
        self.spec = spec
        self.key: tuple[object, ...] | None = (spec, seed, split)  # None once the stream has advanced
        self.g_main = generator(seed, "ldminv", split, "main")
        self.g_uv = generator(seed, "ldminv", split, "uv")

    def generators(self) -> dict[str, torch.Generator]:
        """The stream's generators by name (a checkpoint saves their states)."""
        return {"main": self.g_main, "uv": self.g_uv}

    def advanced(self) -> None:
        """The stream is past its first draw (its generators were restored from a checkpoint): later draws
        must not take the cached first draw's values."""
        self.key = None

    def _singular_values(self, n: int) -> torch.Tensor:
        sp = self.spec
        assert sp.kappa is not None
        s = 1.0 / sp.kappa + (1.0 - 1.0 / sp.kappa) * torch.rand(n, sp.r, generator=self.g_main, dtype=F64)
        if sp.rank is not None and sp.rank < sp.r:
            s[:, sp.rank :] = 0.0
        return s

    def matrices(self, n: int) -> torch.Tensor:
        self.key = None
        sp = self.spec
        if sp.data == "gauss":
            if sp.rank is None or sp.rank >= sp.r:
                return torch.randn(n, sp.rows, sp.cols, generator=self.g_main, dtype=F64) * sp.scale
            g1 = torch.randn(n, sp.rows, sp.rank, generator=self.g_main, dtype=F64)
            g2 = torch.randn(n, sp.rank, sp.cols, generator=self.g_main, dtype=F64)
            return g1 @ g2 * (sp.scale / math.sqrt(sp.rank))
        s = self._singular_values(n)
        out = torch.empty(n, sp.rows, sp.cols, dtype=F64)
        for i in range(n):
            u = haar_orthogonal(sp.rows, self.g_uv)[:, : sp.r]
            v = haar_orthogonal(sp.cols, self.g_uv)[:, : sp.r]
            out[i] = (u * s[i]) @ v.T
        return out

    def singular_values(self, n: int) -> torch.Tensor:
        """(n, r) singular values of the matrices `matrices(n)` would return (descending for gauss)."""
        if self.spec.data == "usv_uniform":
            self.key = None
            return self._singular_values(n)
        key = None if self.key is None else (*self.key, n)
        with _SV_LOCK:
            hit = _SV_CACHE.get(key) if key is not None else None
        if hit is not None:
            sv, state = hit
            self.g_main.set_state(state.clone())
            self.key = None
            return sv.clone()
        sv = torch.linalg.svdvals(self.matrices(n))
        if key is not None:
            with _SV_LOCK:
                if len(_SV_CACHE) >= _SV_CACHE_MAX:
                    _SV_CACHE.pop(next(iter(_SV_CACHE)))
                _SV_CACHE[key] = (sv.clone(), self.g_main.get_state().clone())
        return sv
