"""Initial LD-Minv coefficients (Algorithm 1 step 1) and the theory box projection."""

from __future__ import annotations

import torch

from tasks.common import generator


def identity_value(model: str) -> float:
    """The coefficient value that makes a layer fixed D-Minv: 1 (hyperpower), 0 (warmup's extra term)."""
    return 1.0 if model == "hyperpower" else 0.0


def shape(model: str, depth: int, order: int) -> tuple[int, ...]:
    return (depth, order) if model == "hyperpower" else (depth,)


def initial_coefficients(
    model: str,
    depth: int,
    order: int,
    rule: str,
    seed: int,
    *,
    scale: float | None = None,
    alpha: float | None = None,
    delta: float | None = None,
    given: list[float] | None = None,
) -> torch.Tensor:
    """float64 coefficients: dminv (exact D-Minv), uniform (1 + U(-1,1) scale K^-alpha, the spec's reading
    of |C - 1| = O(K^-alpha)), perturb (1 + delta * Rademacher, Prop. 4), given (explicit values)."""
    shp = shape(model, depth, order)
    base = torch.full(shp, identity_value(model), dtype=torch.float64)
    g = generator(seed, "ldminv", "coeff_init")
    if rule == "dminv":
        return base
    if rule == "uniform":
        assert scale is not None and alpha is not None
        u = 2.0 * torch.rand(shp, generator=g, dtype=torch.float64) - 1.0
        return base + u * scale * depth ** (-alpha)
    if rule == "perturb":
        assert delta is not None
        signs = torch.randint(0, 2, shp, generator=g).to(torch.float64) * 2.0 - 1.0
        return base + delta * signs
    if rule == "given":
        assert given is not None
        return torch.tensor(given, dtype=torch.float64).reshape(shp)
    raise ValueError(f"unknown coeff_init {rule!r}")


def project_box(coeffs: torch.Tensor, model: str, radius: float = 0.125) -> None:
    """In place: keep |C - c_id| <= radius (the proof keeps |C - 1| <= 1/8)."""
    centre = identity_value(model)
    with torch.no_grad():
        coeffs.clamp_(centre - radius, centre + radius)
