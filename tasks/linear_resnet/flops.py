"""Flop counts of exactly what `model.py` and `train.py` compute (a multiply-add is 2 flops).

Each count is split into matrix products (`mm`, checked in the tests against torch's own
FlopCounterMode) and elementwise work (`ew`: additions, residuals, squared norms, updates).
The totals follow spec §5: gram ~ 2 L m^2 (d + 2k) per GD step, independent of n; direct
~ 6 L m^2 n + 4 k m n per step (+ 2 m d n once for the cached A X, or per step for SGD).

Left out: the SVDs and least-squares solve that give the data constants and L* (the same for every
form, O(n d^2) once, a yardstick of the metrics) and the end-of-run active-width count.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Flops:
    mm: float = 0.0  # matrix products
    ew: float = 0.0  # elementwise work

    @property
    def total(self) -> float:
        return self.mm + self.ew

    def __add__(self, other: Flops) -> Flops:
        return Flops(self.mm + other.mm, self.ew + other.ew)

    def __mul__(self, times: float) -> Flops:
        return Flops(self.mm * times, self.ew * times)

    __rmul__ = __mul__


def prefixes(m: int, d: int, depth: int, resnet: bool) -> Flops:
    """F_l = F_{l-1} + W_l F_{l-1}: 2 m^2 d per layer (+ m d for the skip)."""
    return Flops(mm=2.0 * m * m * d * depth, ew=(m * d * depth if resnet else 0.0))


def backward_gram(m: int, d: int, k: int, depth: int, resnet: bool) -> Flops:
    """Per layer M F^T (2kdm) and S^T (.) (2km^2); L-1 suffix updates S + S W (2km^2 + km)."""
    mm = depth * (2.0 * k * d * m + 2.0 * k * m * m) + (depth - 1) * 2.0 * k * m * m
    ew = (depth - 1) * k * m if resnet else 0.0
    return Flops(mm=mm, ew=ew)


def gram_eval(m: int, d: int, k: int, depth: int, resnet: bool) -> Flops:
    """Full-data excess and gradient: prefixes, U = B F_L (2kmd), D = U - phi (kd), M = D Sigma
    (2kd^2), 1/2 <M, D> (2kd), then the backward pass."""
    head = Flops(mm=2.0 * k * m * d + 2.0 * k * d * d, ew=k * d + 2.0 * k * d)
    return prefixes(m, d, depth, resnet) + head + backward_gram(m, d, k, depth, resnet)


def gram_batch(m: int, d: int, k: int, depth: int, batch: int, resnet: bool) -> Flops:
    """Batch Gram matrices (2d^2B + 2kdB), U (2kmd), M = U Sigma_b - C_b (2kd^2 + kd), the batch
    loss <M - C_b, U> + ||Y_b||^2 (3kd + 2kB), then the backward pass."""
    gram = Flops(mm=2.0 * d * d * batch + 2.0 * k * d * batch)
    head = Flops(mm=2.0 * k * m * d + 2.0 * k * d * d, ew=k * d + 3.0 * k * d + 2.0 * k * batch)
    return gram + prefixes(m, d, depth, resnet) + head + backward_gram(m, d, k, depth, resnet)


def input_map(m: int, d: int, n: int) -> Flops:
    """H_0 = A X over n samples: cached once for GD, per step for SGD."""
    return Flops(mm=2.0 * m * d * n)


def direct(m: int, k: int, depth: int, n: int, resnet: bool) -> Flops:
    """Activations over n samples (H_0 given): forward 2m^2n (+mn) per layer, output 2kmn, residual
    kn, loss 2kn, B^T R 2kmn, per-layer gradient 2m^2n, L-1 delta updates 2m^2n (+mn)."""
    mm = depth * 2.0 * m * m * n + 2.0 * k * m * n + 2.0 * k * m * n + depth * 2.0 * m * m * n
    mm += (depth - 1) * 2.0 * m * m * n
    ew = k * n + 2.0 * k * n + ((depth + depth - 1) * m * n if resnet else 0.0)
    return Flops(mm=mm, ew=ew)


def direct_excess(k: int, n: int) -> Flops:
    """1/2 ||B H_L - phi X||^2 from the output: subtract (kn) and squared norm (2kn)."""
    return Flops(ew=3.0 * k * n)


def gram_setup(d: int, k: int, n: int) -> Flops:
    """Sigma = X X^T, C = Y X^T and ||Y||^2, once per run."""
    return Flops(mm=2.0 * d * d * n + 2.0 * k * d * n, ew=2.0 * k * n)


def direct_setup(m: int, d: int, k: int, n: int) -> Flops:
    """A X (cached) and phi X (the reference output for the exact suboptimality), once per run."""
    return input_map(m, d, n) + Flops(mm=2.0 * k * d * n)


def update(m: int, depth: int) -> Flops:
    """W_l -= step * G_l (the n/B factor of SGD is folded into the scalar): 2m^2 per layer."""
    return Flops(ew=2.0 * m * m * depth)


def grad_norms(m: int, depth: int) -> Flops:
    """Per-layer squared Frobenius norms of the gradient (logged steps only)."""
    return Flops(ew=2.0 * m * m * depth)


def weight_distance(m: int, depth: int) -> Flops:
    """max_l ||W_l - W_l(0)||_F: subtract and squared norm (logged steps only)."""
    return Flops(ew=3.0 * m * m * depth)


def initial_loss(m: int, d: int, k: int, depth: int, resnet: bool) -> Flops:
    """L(W(0)) before training (it sets the theory step): prefixes, U, D, M and <M, D>."""
    head = Flops(mm=2.0 * k * m * d + 2.0 * k * d * d, ew=3.0 * k * d)
    return prefixes(m, d, depth, resnet) + head


def gd_eval(m: int, d: int, k: int, depth: int, n: int, form: str, resnet: bool) -> Flops:
    """Suboptimality and gradient at W_t on all n samples."""
    if form == "gram":
        return gram_eval(m, d, k, depth, resnet)
    return direct(m, k, depth, n, resnet) + direct_excess(k, n)


def sgd_eval(m: int, d: int, k: int, depth: int, batch: int, form: str, resnet: bool) -> Flops:
    """Batch loss and gradient at W_t on B samples."""
    if form == "gram":
        return gram_batch(m, d, k, depth, batch, resnet)
    return input_map(m, d, batch) + direct(m, k, depth, batch, resnet)


def gd_step(m: int, d: int, k: int, depth: int, n: int, form: str, resnet: bool) -> Flops:
    """One GD iteration: evaluation at W_t and the update (logging extras not included)."""
    return gd_eval(m, d, k, depth, n, form, resnet) + update(m, depth)


def sgd_step(m: int, d: int, k: int, depth: int, batch: int, form: str, resnet: bool) -> Flops:
    """One SGD iteration on a batch of B samples, update included (logged full evaluations not)."""
    return sgd_eval(m, d, k, depth, batch, form, resnet) + update(m, depth)
