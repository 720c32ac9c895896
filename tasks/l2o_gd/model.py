"""The coordinate-wise MLP of Eq. 3 and its deterministic initialisation (sec. 5).

Weights are a list [W_1 (n_1 x 2), ..., W_{L-1} (n_{L-1} x n_{L-2}), W_L (1 x n_{L-1})], no biases,
shared across the N*d coordinates, the N instances and the T iterations. P = 2 sigmoid(W_L G_{L-1}) lies
in (0, 2), so the per-coordinate step P/beta lies in (0, 2/beta).
"""

from __future__ import annotations

import torch

from tasks.common import generator


def orthogonal(rows: int, cols: int, g: torch.Generator, gain: float) -> torch.Tensor:
    """What torch.nn.init.orthogonal_ draws, from our own generator: Gaussian -> QR -> Q sign(diag R),
    transposed for wide matrices so that the rows (or columns) are orthonormal; then times `gain`."""
    flat = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    if rows < cols:
        flat = flat.T
    q, r = torch.linalg.qr(flat)
    q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
    if rows < cols:
        q = q.T
    return gain * q


def init_weights(widths: list[int], e: float, seed: int, dtype: torch.dtype, device: str) -> list[torch.Tensor]:
    """Hidden layers orthogonal times e; the last layer zero, so P = 1 everywhere: the first forward pass
    is GD with step 1/beta exactly (the paper's 'alignment')."""
    ws = []
    for layer in range(len(widths) - 2):
        g = generator(seed, "l2o_gd", "W", layer + 1)
        ws.append(orthogonal(widths[layer + 1], widths[layer], g, e))
    ws.append(torch.zeros(1, widths[-2], dtype=torch.float64))
    return [w.to(device=device, dtype=dtype).contiguous().requires_grad_(True) for w in ws]


def last_hidden(ws: list[torch.Tensor], z: torch.Tensor) -> torch.Tensor:
    """G_{L-1}^T: the last hidden layer's output for the (..., K, 2) features, shape (..., K, n_{L-1}); leading
    dims of the weights (a batch of nets) broadcast against those of the features."""
    h = z
    for w in ws[:-1]:
        h = torch.relu(h @ w.mT)
    return h


def step_multiplier(ws: list[torch.Tensor], z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """P = 2 sigmoid(W_L G_{L-1}) per coordinate, shape (..., K), and the last hidden output (..., K, n_{L-1})."""
    h = last_hidden(ws, z)
    return 2.0 * torch.sigmoid((h @ ws[-1].mT).squeeze(-1)), h
