"""Cost model of one LD-Minv forward pass (spec section 5), for the form the code computes."""

from __future__ import annotations


def minv_forward_flops(rows: int, cols: int, depth: int, order: int) -> float:
    """E on the smaller side q = min(d1, d2), p the other: per layer A X (2 p q^2), L - 2 Horner
    matmuls (2 (L-2) q^3) and the product with X (2 p q^2); plus the final loss A X A (about 4 p q^2)."""
    q, p = min(rows, cols), max(rows, cols)
    return float(depth * (4 * p * q * q + 2 * max(order - 2, 0) * q**3) + 4 * p * q * q)
