"""Initialisation schemes of Sec. 2.3, exactly as the spec (section 1.8) defines them.

Padding: A (m x n) ~= B (k x s) puts B in the top-left block, zeros elsewhere; A ~=_1 B also puts
ones on the rest of the diagonal. Every random layer draw comes from a generator keyed on
(init_seed, layer index) only, so Q_k for layer j is the same matrix at every width whenever k is
(spec G4): that is what makes Thm 3.1's width independence exact rather than distributional, and
it also makes orth_identity and orthogonal identical when no width exceeds max(d_in, d_out).
"""

from __future__ import annotations

import math

import torch

from tasks.common import generator, haar_from_gaussians, haar_orthogonal

LayerWeights = list[torch.Tensor]  # ws[j-1] = W_j, shape (n_j, n_{j-1})


def _layer_gen(seed: int, j: int) -> torch.Generator:
    return generator(seed, "deep_linear", "init_layer", j)


def orthogonal(widths: list[int], seed: int) -> LayerWeights:
    """W_j ~= Q_{min(n_j, n_{j-1})}: zero padding of a square Haar matrix (Saxe et al.)."""
    ws = []
    for j in range(1, len(widths)):
        n_out, n_in = widths[j], widths[j - 1]
        k = min(n_out, n_in)
        w = torch.zeros(n_out, n_in, dtype=torch.float64)
        w[:k, :k] = haar_orthogonal(k, _layer_gen(seed, j))
        ws.append(w)
    return ws


def orth_identity(widths: list[int], seed: int) -> LayerWeights:
    """W_j ~=_1 Q_{k_j}, k_j = min(n_j, n_{j-1}, max(n_0, n_L)): Q top-left, ones on the rest of the diagonal."""
    cap = max(widths[0], widths[-1])
    ws = []
    for j in range(1, len(widths)):
        n_out, n_in = widths[j], widths[j - 1]
        k = min(n_out, n_in, cap)
        w = torch.eye(n_out, n_in, dtype=torch.float64)
        w[:k, :k] = haar_orthogonal(k, _layer_gen(seed, j))
        ws.append(w)
    return ws


def identity(widths: list[int]) -> LayerWeights:
    """W_j = eye(n_j, n_{j-1}) (Hardt-Ma, Bartlett et al.); deterministic."""
    return [torch.eye(widths[j], widths[j - 1], dtype=torch.float64) for j in range(1, len(widths))]


def random_gaussian(widths: list[int], seed: int, std: float | None) -> LayerWeights:
    """(W_j)_ik ~ N(0, std^2), default std^2 = 1/n_{j-1} (fan-in); width dependent by nature."""
    ws = []
    for j in range(1, len(widths)):
        n_out, n_in = widths[j], widths[j - 1]
        s = std if std is not None else 1.0 / math.sqrt(n_in)
        ws.append(s * torch.randn(n_out, n_in, generator=_layer_gen(seed, j), dtype=torch.float64))
    return ws


def balanced(widths: list[int], seed: int, std: float | None) -> LayerWeights:
    """Arora et al. 2018: W0 = U S V^T (d_out x d_in, N(0, std^2), default std^2 = 1/d_in);
    W_L ~= U S^(1/L), W_j ~= S^(1/L) for 1 < j < L, W_1 ~= S^(1/L) V^T. Rank min(d_in, d_out)."""
    d_in, d_out, depth = widths[0], widths[-1], len(widths) - 1
    s0 = std if std is not None else 1.0 / math.sqrt(d_in)
    g = generator(seed, "deep_linear", "init_balanced")
    w0 = s0 * torch.randn(d_out, d_in, generator=g, dtype=torch.float64)
    if depth == 1:
        return [w0]
    u, s, vh = torch.linalg.svd(w0, full_matrices=False)
    r = s.shape[0]
    root = s ** (1.0 / depth)
    ws = []
    for j in range(1, depth + 1):
        w = torch.zeros(widths[j], widths[j - 1], dtype=torch.float64)
        if j == 1:
            w[:r, :] = root[:, None] * vh
        elif j == depth:
            w[:, :r] = u * root
        else:
            w[:r, :r] = torch.diag(root)
        ws.append(w)
    return ws


def init_weights(
    init: str,
    widths: list[int],
    seed: int,
    dtype: torch.dtype,
    *,
    balanced_std: float | None = None,
    random_std: float | None = None,
) -> LayerWeights:
    if init == "orth_identity":
        ws = orth_identity(widths, seed)
    elif init == "orthogonal":
        ws = orthogonal(widths, seed)
    elif init == "identity":
        ws = identity(widths)
    elif init == "balanced":
        ws = balanced(widths, seed, balanced_std)
    elif init == "random":
        ws = random_gaussian(widths, seed, random_std)
    else:
        raise ValueError(f"unknown init {init!r}; valid: orth_identity, orthogonal, identity, balanced, random")
    return [w.to(dtype) for w in ws]


def init_weights_many(
    init: str,
    widths: list[int],
    seeds: list[int],
    dtype: torch.dtype,
    *,
    balanced_std: float | None = None,
    random_std: float | None = None,
) -> list[LayerWeights]:
    """`init_weights` for each seed, the same tensors bit for bit. The orthogonal inits draw each layer's
    Gaussian from its own generator as one run does and factor the whole stack in one QR: one run's init is
    a QR, a sign fix and a padding per layer, each a call of a few microseconds' work (measured: 14 % of a
    batched BCGD member's time at width 16, depth 10, before this)."""
    if init not in ("orth_identity", "orthogonal") or len(seeds) < 2:
        return [init_weights(init, widths, s, dtype, balanced_std=balanced_std, random_std=random_std) for s in seeds]
    cap = max(widths[0], widths[-1]) if init == "orth_identity" else None
    layers: list[torch.Tensor] = []
    for j in range(1, len(widths)):
        n_out, n_in = widths[j], widths[j - 1]
        k = min(n_out, n_in) if cap is None else min(n_out, n_in, cap)
        gauss = torch.stack([torch.randn(k, k, generator=_layer_gen(s, j), dtype=torch.float64) for s in seeds])
        pad = torch.zeros if cap is None else torch.eye  # orthogonal: zero padding; orth_identity: ones on the diagonal
        w = pad(n_out, n_in, dtype=torch.float64).expand(len(seeds), n_out, n_in).clone()
        w[:, :k, :k] = _haar_stack(gauss)
        layers.append(w.to(dtype))
    return [[w[i] for w in layers] for i in range(len(seeds))]


def _haar_stack(gauss: torch.Tensor) -> torch.Tensor:
    """`haar_from_gaussians` of a stack of k x k float64 Gaussians, each matrix bit for bit as alone. LAPACK
    factors a stack matrix by matrix, but its kernels round differently on a matrix whose start is not
    aligned as a lone tensor's (64 bytes): measured, k = 5 and 7 changed the last bits of every other matrix
    of a stack. A k x k float64 matrix is a multiple of 64 bytes when k % 4 == 0, so such stacks are factored
    in one call and the others one matrix at a time."""
    k = gauss.shape[-1]
    if k % 4 == 0:
        return haar_from_gaussians(gauss)
    return torch.stack([haar_from_gaussians(a) for a in gauss])


def end_to_end(ws: LayerWeights) -> torch.Tensor:
    """W_{L:1} = W_L ... W_1."""
    out = ws[0]
    for w in ws[1:]:
        out = w @ out
    return out
