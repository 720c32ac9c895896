"""Flop counting (spec section 5): a counter the learners use, and closed forms.

A multiply-add counts 2 flops; a matrix product (p x q)(q x r) costs 2pqr; an axpy or a Frobenius
inner product costs 2 per entry. The learners route every product through `FlopCounter.mm`, so the
count is that of the form the code actually computes (covariance form for L2; products with an
identity factor, at the top and bottom layers, are skipped and not counted).

`bcgd_sweep_flops` / `gd_iter_flops` are the same counts in closed form (tests check they agree
exactly with the counter); `spec_*` are the spec's approximate formulas, kept to compare with its
table. Eigenvalue routines count 4k^3/3 (Householder tridiagonalisation dominates when only the
eigenvalues are needed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

# numpy's OpenBLAS computes a product of at most about this many multiply-adds on one thread (measured here:
# 80^3 on one, 96^3 on every core); beyond it a worker pinned to one thread would spread over the machine,
# since the OpenBLAS numpy loaded ignores the thread count the worker sets (runner.execute.worker)
ONE_THREAD_MNK = 64**3

Product = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def numpy_product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b by numpy's matmul, for CPU tensors; the result is numpy's array, shared."""
    return torch.from_numpy(np.matmul(a.numpy(), b.numpy()))


def stack_product(dims: Sequence[int], dtype: torch.dtype, device: str) -> Product:
    """The kernel for the products of a stack of configs (a leading config axis, tasks.deep_linear.batched)
    whose matrices have sides among `dims`: numpy's matmul for small float64 matrices on the CPU, else
    torch's. torch multiplies a CPU stack one matrix at a time, each a dispatched mm through its MKL
    (pytorch/pytorch#76705), which on this project's AMD EPYC takes a slow path: (64, 16, 16) @
    (64, 16, 16) costs 42 us there against 16 us in numpy, whose matmul loops over its OpenBLAS in C
    (1.9-2.9x for stacks of 64 and 256, 8 to 64 wide, 1.1-1.7x with the right operand transposed;
    benchmarks/stacked_products.py). float32 stays with torch (numpy's is slower there with a transposed
    operand, 0.8x), and so do products past ONE_THREAD_MNK and other devices.
    Chosen per batch key, not per product: a member's numbers then do not depend on its stack, as numpy
    multiplies each matrix by the same BLAS call whatever the stack's length (a batch of one included,
    which is how a single run of these configs computes), and the per-product cost is only the kernel's."""
    small = max(dims) ** 3 <= ONE_THREAD_MNK
    return numpy_product if device == "cpu" and dtype == torch.float64 and small else torch.matmul


def entries(t: torch.Tensor) -> int:
    """Entries of one config's matrix: a batched tensor (leading config axis) counts one member's."""
    return t.shape[-2] * t.shape[-1] if t.dim() >= 2 else t.numel()


class FlopCounter:
    """Counts one config's flops. The learners are written for one config's matrices or for a stack of
    them (a leading config axis, tasks.deep_linear.batched): products and entries are counted per
    member, so a batch's counter reads what each of its members' single runs would. `product` computes
    them (a stack's: `stack_product`)."""

    __slots__ = ("product", "total")

    def __init__(self, product: Product = torch.matmul) -> None:
        self.total = 0.0
        self.product = product

    def mm(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        cols = b.shape[-1] if b.dim() >= 2 else 1
        self.total += 2.0 * a.shape[-2] * a.shape[-1] * cols
        return self.product(a, b)

    def add(self, n: float) -> None:
        self.total += n

    def eigvalsh(self, a: torch.Tensor) -> torch.Tensor:
        k = a.shape[0]
        self.total += 4.0 * k**3 / 3.0
        return torch.linalg.eigvalsh(a)


def _update_core(d_in: int, d_out: int, n_i: int, n_im1: int, top: bool, bottom: bool) -> float:
    """One BCGD L2 update with the optimal step, given A (None at the top) and the prefix P (None at the bottom)."""
    f = 0.0
    if not top:
        f += 2 * d_out * n_i * n_im1  # AW = A W_i
    if not bottom:
        f += 2 * d_out * n_im1 * d_in  # M = AW P
    f += 2 * d_out * d_in * d_in + d_out * d_in  # R = M Sxx - Syx
    if not bottom:
        f += 2 * d_out * d_in * n_im1  # R P^T
    if not top:
        f += 2 * n_i * d_out * n_im1  # G = A^T (R P^T)
        f += 2 * d_out * n_i * n_im1  # A G
    if not bottom:
        f += 2 * d_out * n_im1 * d_in  # D = AG P
    f += 2 * d_out * d_in * d_in + 2 * d_out * d_in  # D Sxx and <D Sxx, D>
    f += 4 * n_i * n_im1  # ||G||^2 and the update of W_i
    f += 2 * d_out * d_in  # M - eta D
    return f


def bcgd_sweep_flops(widths: list[int], order: str) -> float:
    """Exact learner flops of one BCGD sweep (L2, optimal step), excluding the error metric."""
    d_in, d_out, depth = widths[0], widths[-1], len(widths) - 1
    total = 0.0
    if order == "desc":
        total += sum(2 * widths[j] * widths[j - 1] * d_in for j in range(2, depth))  # prefixes
        for i in range(depth, 0, -1):
            total += _update_core(d_in, d_out, widths[i], widths[i - 1], i == depth, i == 1)
            if i < depth:
                total += 2 * d_out * widths[i - 1]  # A <- AW - eta AG
    else:
        total += sum(2 * d_out * widths[j + 1] * widths[j] for j in range(1, depth - 1))  # suffixes
        for i in range(1, depth + 1):
            total += _update_core(d_in, d_out, widths[i], widths[i - 1], i == depth, i == 1)
            if 1 < i < depth:
                total += 2 * widths[i] * widths[i - 1] * d_in  # B <- W_i B
    return total


def gd_prefix_flops(widths: list[int]) -> float:
    """Prefixes W_j..W_1 (j < L) and the end-to-end product, recomputed after every GD update."""
    d_in, d_out, depth = widths[0], widths[-1], len(widths) - 1
    f = sum(2 * widths[j] * widths[j - 1] * d_in for j in range(2, depth))
    if depth >= 2:
        f += 2 * d_out * widths[depth - 1] * d_in
    return f


def gd_iter_flops(widths: list[int]) -> float:
    """Exact learner flops of one GD iteration (covariance form), excluding the error metric."""
    d_in, d_out, depth = widths[0], widths[-1], len(widths) - 1
    f = 2 * d_out * d_in * d_in + d_out * d_in  # R
    f += sum(2 * d_out * widths[j + 1] * widths[j] for j in range(1, depth - 1))  # suffixes
    for j in range(1, depth + 1):
        if j > 1:
            f += 2 * d_out * d_in * widths[j - 1]  # R P_{j-1}^T
        if j < depth:
            f += 2 * widths[j] * d_out * widths[j - 1]  # S_j^T (.)
        f += 2 * widths[j] * widths[j - 1]  # update
    return f + gd_prefix_flops(widths)


# --- the spec's approximate formulas (section 5), n = hidden width -------------------------------


def spec_bcgd_sweep(d_in: int, d_out: int, n: int, depth: int) -> float:
    if depth == 1:
        return 4.0 * d_out * d_in * d_in
    per_update = 6 * d_out * n * n + 6 * d_out * n * d_in + 4 * d_out * d_in * d_in + 4 * n * n
    return 2.0 * (depth - 2) * n * n * d_in + depth * per_update


def spec_gd_iter(d_in: int, d_out: int, n: int, depth: int) -> float:
    return (
        2.0 * (depth - 1) * n * n * d_in
        + 2.0 * (depth - 1) * d_out * n * n
        + depth * (2 * d_out * d_in * n + 2 * n * d_out * n)
        + 2 * d_out * d_in * d_in
    )
