"""Small helpers shared by task modules: seeded generators, dtypes, condition-number control."""

from __future__ import annotations

import hashlib

import torch

from tasks.base import DType


def derive_seed(seed: int, *tags: object) -> int:
    """A 63-bit seed derived from `seed` and tags, stable across processes and Python versions.

    Lets one `seed` param drive independent streams (data, init, per-layer draws) so that changing
    one axis of a grid (say a layer's width) does not shift the random numbers of another.
    """
    text = ":".join([str(seed), *map(str, tags)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def generator(seed: int, *tags: object) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(derive_seed(seed, *tags))
    return g


def torch_dtype(name: DType) -> torch.dtype:
    return {"float64": torch.float64, "float32": torch.float32}[name]


def haar_orthogonal(k: int, g: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """A Haar-distributed k x k orthogonal matrix (QR of a Gaussian with the sign fix)."""
    q, r = torch.linalg.qr(torch.randn(k, k, generator=g, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
    return q.to(dtype)


def with_singular_values(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Replace the singular values of `x` (rank min(x.shape)) with `s`, keeping its singular vectors."""
    u, _, vh = torch.linalg.svd(x, full_matrices=False)
    return (u * s.to(x.dtype).unsqueeze(0)) @ vh
