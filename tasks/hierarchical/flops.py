"""Cost model of spec 5, counted for the form the code computes (dense matmuls, direct Gram matrices).

q_0 = q_1 = d, q_j = binom(k_j+1, 2) for j >= 2; Q_l = sum_{j in J_l} q_j.
Forward per sample with layers 2..top in the output:
    sum_{l <= top} [2 (m + k_l) Q_l + 3 m]  +  sum_{2 <= j < top} 2 q_j k_j  +  d (S_1).
Backward is counted as twice the forward (spec 5). The distillation terms of layer l are formed
directly (Q x Q Grams): lam3 + lam4 + lam5 cost 2 (k_l + m) (q_a q_b + q_b^2 + Q_l^2) forward, again
x3 with backward, once per step (not per sample).
"""

from __future__ import annotations

from tasks.hierarchical.wk_model import q_dim


def wk_forward(d: int, ks: list[int], m: int, graph: dict[int, list[int]], top: int) -> float:
    total = float(d)
    for layer in range(2, top + 1):
        big_q = sum(q_dim(j, d, ks) for j in graph[layer])
        total += 2.0 * (m + ks[layer - 2]) * big_q + 3.0 * m
        if layer < top:
            total += 2.0 * q_dim(layer, d, ks) * ks[layer - 2]
    return total


def wk_reg(d: int, ks: list[int], m: int, graph: dict[int, list[int]], layer: int) -> float:
    qs = [q_dim(j, d, ks) for j in graph[layer]]
    big_q, q_prev, q_skip = sum(qs), qs[-1], big_q_minus(qs)
    return 2.0 * (ks[layer - 2] + m) * (q_prev * q_skip + q_prev * q_prev + big_q * big_q)


def big_q_minus(qs: list[int]) -> int:
    return sum(qs[:-1])


def densenet_forward(d: int, m: int, graph: dict[int, list[int]], top: int) -> float:
    """Plain DenseNet of width m: G_l = sigma(sum_j W_{l,j} G_j) and the head u_l^T G_l."""
    total = float(d)
    for layer in range(2, top + 1):
        fan_in = sum(d if j < 2 else m for j in graph[layer])
        total += 2.0 * m * fan_in + 4.0 * m
    return total
