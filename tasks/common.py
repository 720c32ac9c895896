"""Small helpers shared by task modules: seeded generators, dtypes, condition-number control."""

from __future__ import annotations

import hashlib
from typing import TypeVar

import torch

from tasks.base import DType

P = TypeVar("P")


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
    return haar_from_gaussians(torch.randn(k, k, generator=g, dtype=torch.float64)).to(dtype)


def haar_from_gaussians(a: torch.Tensor) -> torch.Tensor:
    """The Haar orthogonal matrix of each k x k Gaussian of `a` (one, or a stack, in one QR call): QR with
    the sign fix. Whether a stack's matrices come out bit for bit as alone depends on their alignment
    (tasks.deep_linear.init._haar_stack)."""
    q, r = torch.linalg.qr(a)
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)


def with_singular_values(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Replace the singular values of `x` (rank min(x.shape)) with `s`, keeping its singular vectors."""
    u, _, vh = torch.linalg.svd(x, full_matrices=False)
    return (u * s.to(x.dtype).unsqueeze(0)) @ vh
