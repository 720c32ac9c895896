"""Closed-form loss and gradients of f(x) = B (I+W_L)...(I+W_1) A x (resnet) or B W_L...W_1 A x
(standard), for the sum loss 1/2 ||f(X) - Y||_F^2. Plain torch functions on tensors.

Gradient (spec §1.3): grad_l = S_l^T R H_{l-1}^T with S_l = B (I+W_L)...(I+W_{l+1}) the suffix,
H_{l-1} = (I+W_{l-1})...(I+W_1) A X the activations, R = U X - Y the residual.

Two exact forms:
- gram: write H_{l-1} = F_{l-1} X with the prefix F_{l-1} = (I+W_{l-1})...(I+W_1) A (m x d); then
  R H_{l-1}^T = (U X X^T - Y X^T) F_{l-1}^T = M F_{l-1}^T, and the data enter only through
  X X^T and Y X^T. Cost per step is independent of n (spec §5).
- direct: propagate the m x n activations forward and the m x n deltas backward.

Every flop these functions spend is counted by the matching function of `flops.py`.

Every function broadcasts over leading axes: a batch of configs of one shape (weights (B, m, m), data
(B, d, n), ...) runs through the same code as one config, and scalars come back with shape (B,).
"""

from __future__ import annotations

import torch

MATRIX = (-2, -1)  # the matrix axes; anything before them is a batch of configs


def init_hidden(
    depth: int, m: int, resnet: bool, w_var: float | None, seeds: list[torch.Generator] | None, dtype: torch.dtype
) -> list[torch.Tensor]:
    """Zero init for the ResNet (Algorithm 1); N(0, w_var) per layer for the standard net (Du & Hu).

    One generator per layer, so the first layers' draws do not change when the depth does.
    """
    if resnet:
        return [torch.zeros(m, m, dtype=dtype) for _ in range(depth)]
    assert seeds is not None and w_var is not None
    return [(torch.randn(m, m, generator=g, dtype=torch.float64) * w_var**0.5).to(dtype) for g in seeds]


def prefixes(ws: list[torch.Tensor], a: torch.Tensor, resnet: bool) -> list[torch.Tensor]:
    """F_0 = A, F_l = (I + W_l) F_{l-1} (resnet) or W_l F_{l-1}; returns [F_0, ..., F_L]."""
    out = [a]
    for w in ws:
        f = out[-1]
        out.append(f + w @ f if resnet else w @ f)  # F + W F: never forms I + W
    return out


def backward_gram(
    ws: list[torch.Tensor], b: torch.Tensor, fs: list[torch.Tensor], mmat: torch.Tensor, resnet: bool
) -> list[torch.Tensor]:
    """grad_l = S_l^T (M F_{l-1}^T) for l = L..1 with the suffix S_L = B, S_{l-1} = S_l (I + W_l)."""
    depth = len(ws)
    grads: list[torch.Tensor] = [torch.empty(0)] * depth
    s = b
    for l in range(depth, 0, -1):
        grads[l - 1] = s.mT @ (mmat @ fs[l - 1].mT)
        if l > 1:
            w = ws[l - 1]
            s = s + s @ w if resnet else s @ w
    return grads


def gram_excess_grad(
    ws: list[torch.Tensor], a: torch.Tensor, b: torch.Tensor, sigma: torch.Tensor, phi: torch.Tensor, resnet: bool
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Full-data suboptimality L(W) - L* and gradient from X X^T alone.

    With D = U - phi, L - L* = 1/2 tr(D Sigma D^T) (Lemma B.1) and U Sigma - Y X^T = D Sigma (normal
    equations). Both avoid the cancellation of 1/2 (tr(U Sigma U^T) - 2 tr(U C^T) + ||Y||^2) that
    floors the absolute loss near 1e-12 * ||Y||^2 (spec gotcha 8).
    """
    fs = prefixes(ws, a, resnet)
    dmat = b @ fs[-1] - phi
    mmat = dmat @ sigma
    excess = 0.5 * (mmat * dmat).sum(dim=MATRIX)
    return excess, backward_gram(ws, b, fs, mmat, resnet)


def gram_batch_loss_grad(
    ws: list[torch.Tensor], a: torch.Tensor, b: torch.Tensor, xb: torch.Tensor, yb: torch.Tensor, resnet: bool
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Batch loss 1/2 ||U X_b - Y_b||^2 and its (unscaled) gradient from the batch's Gram matrices.

    The normal equations do not hold on a batch, so M = U Sigma_b - C_b is formed explicitly.
    """
    sigma_b = xb @ xb.mT
    c_b = yb @ xb.mT
    fs = prefixes(ws, a, resnet)
    u = b @ fs[-1]
    mmat = u @ sigma_b - c_b
    # tr(U S U^T) - 2 tr(U C^T) = <U S - 2C, U> = <M - C, U>; only used to detect divergence.
    loss = 0.5 * (((mmat - c_b) * u).sum(dim=MATRIX) + (yb * yb).sum(dim=MATRIX))
    return loss, backward_gram(ws, b, fs, mmat, resnet)


def direct_loss_grad(
    ws: list[torch.Tensor], h0: torch.Tensor, b: torch.Tensor, y: torch.Tensor, resnet: bool
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Loss 1/2 ||B H_L - Y||^2, the output B H_L and the gradient, from activations (h0 = A X).

    Returns (loss, output, grads); the caller uses the output for the exact suboptimality.
    """
    hs = [h0]
    for w in ws:
        h = hs[-1]
        hs.append(h + w @ h if resnet else w @ h)
    out = b @ hs[-1]
    r = out - y
    loss = 0.5 * (r * r).sum(dim=MATRIX)
    delta = b.mT @ r
    depth = len(ws)
    grads: list[torch.Tensor] = [torch.empty(0)] * depth
    for l in range(depth, 0, -1):
        grads[l - 1] = delta @ hs[l - 1].mT
        if l > 1:
            w = ws[l - 1]
            delta = delta + w.mT @ delta if resnet else w.mT @ delta
    return loss, out, grads


def end_to_end(ws: list[torch.Tensor], a: torch.Tensor, b: torch.Tensor, resnet: bool) -> torch.Tensor:
    """U = B V A (k x d), for tests and diagnostics."""
    return b @ prefixes(ws, a, resnet)[-1]


def sum_loss(
    ws: list[torch.Tensor], a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor, resnet: bool
) -> torch.Tensor:
    """The definition 1/2 ||B V A X - Y||_F^2, straight from the formula (the finite-difference oracle)."""
    r = end_to_end(ws, a, b, resnet) @ x - y
    return 0.5 * (r * r).sum(dim=MATRIX)
