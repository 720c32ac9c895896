"""The hierarchical target of spec 1.7: G*(x) = sum_l alpha_l ||S*_l(x)||^2, normalised.

S*_0 = x, S*_1 = x∘x - 1 (both input laws have unit variance, so E[x∘x] = 1 exactly),
S*_l = sum_{j in J_l} W*_{l,j} G*_j with G*_j = S*_j for j in {0, 1} and (S*_j)^2 for j >= 2.
W*_{l,j} = U diag(sv) V^T from the thin SVD of a Gaussian matrix, sv in [1/kappa, kappa].
Normalisation, layer by layer on n_mc fresh inputs: each block scaled to E||W* G*_j||^2 = k_l/|J_l|,
then the whole layer to E||S*_l||^2 = k_l; y is divided by the Monte-Carlo std of G*, which rescales
every alpha_l by one constant and keeps alpha_l / alpha_{l+1} = 1/gamma.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from tasks.common import generator
from tasks.hierarchical.params import TargetFields

F64 = torch.float64
SQRT3 = math.sqrt(3.0)


def skip_graph(depth: int, j_type: str) -> dict[int, list[int]]:
    """J_l for l = 2..L (spec 1.2), each list sorted with l-1 last (the 'previous layer' block)."""
    graph: dict[int, list[int]] = {2: [0, 1]}
    for layer in range(3, depth + 1):
        # J_3 = {0, 2} is forced by the rules (l-2 = 1 is forbidden)
        skip = layer - 3 if layer > 3 and j_type == "resnet" else 0
        graph[layer] = [skip, layer - 1]
    return graph


def sample_inputs(n: int, d: int, dist: str, g: torch.Generator) -> torch.Tensor:
    """n x d inputs with unit-variance coordinates: U[-sqrt3, sqrt3] or N(0, 1)."""
    if dist == "uniform":
        return (torch.rand(n, d, generator=g, dtype=F64) * 2.0 - 1.0) * SQRT3
    return torch.randn(n, d, generator=g, dtype=F64)


def in_dims(d: int, ks: list[int]) -> list[int]:
    """Dimension of G*_j for j = 0..L: d, d, k_2, ..., k_L."""
    return [d, d, *ks]


@dataclass
class Target:
    d: int
    depth: int
    ks: list[int]  # k_2..k_L
    graph: dict[int, list[int]]
    weights: dict[tuple[int, int], torch.Tensor]  # (l, j) -> W*_{l,j}, normalised
    alphas: list[float]  # alpha_2..alpha_L before the y normalisation
    y_scale: float  # std of G* on the normalisation sample: y = G* / y_scale
    block_scales: dict[tuple[int, int], float] = field(default_factory=dict)
    layer_scales: dict[int, float] = field(default_factory=dict)

    def k(self, layer: int) -> int:
        return self.ks[layer - 2]

    def alpha_eff(self, layer: int) -> float:
        """The output weight of layer l in units where Var(y) = 1."""
        return self.alphas[layer - 2] / self.y_scale

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[S*_0, S*_1, S*_2, ..., S*_L] on the rows of x (float64)."""
        x = x.to(F64)
        s: list[torch.Tensor] = [x, x * x - 1.0]
        g: list[torch.Tensor] = [x, s[1]]
        for layer in range(2, self.depth + 1):
            out = sum(g[j] @ self.weights[(layer, j)].T for j in self.graph[layer])
            assert isinstance(out, torch.Tensor)
            s.append(out)
            g.append(out * out)
        return s

    def layer_terms(self, x: torch.Tensor) -> torch.Tensor:
        """n x (L-1): the normalised output terms alpha_l ||S*_l||^2 / y_scale; y is their row sum."""
        s = self.features(x)
        cols = [self.alpha_eff(layer) * (s[layer] ** 2).sum(1) for layer in range(2, self.depth + 1)]
        return torch.stack(cols, dim=1)

    def y(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_terms(x).sum(1)


def _block(rows: int, cols: int, kappa: float, g: torch.Generator) -> torch.Tensor:
    a = torch.randn(rows, cols, generator=g, dtype=F64)
    u, _, vh = torch.linalg.svd(a, full_matrices=False)
    r = min(rows, cols)
    if kappa > 1.0:
        sv = torch.exp((torch.rand(r, generator=g, dtype=F64) * 2.0 - 1.0) * math.log(kappa))
    else:
        sv = torch.ones(r, dtype=F64)
    return (u * sv) @ vh


def make_target(p: TargetFields) -> Target:
    """Draw W* (target_seed) and normalise it on n_mc fresh inputs from the same seed (spec 1.7)."""
    ks = p.widths()
    graph = skip_graph(p.L, p.j_type)
    dims = in_dims(p.d, ks)
    g = generator(p.tseed(), "hierarchical", "target")
    weights = {(layer, j): _block(ks[layer - 2], dims[j], p.kappa, g) for layer in graph for j in graph[layer]}
    x = sample_inputs(p.n_mc, p.d, p.dist, generator(p.tseed(), "hierarchical", "normalisation"))
    gs: list[torch.Tensor] = [x, x * x - 1.0]
    block_scales: dict[tuple[int, int], float] = {}
    layer_scales: dict[int, float] = {}
    for layer in range(2, p.L + 1):
        k_l = ks[layer - 2]
        share = k_l / len(graph[layer])
        parts = []
        for j in graph[layer]:
            part = gs[j] @ weights[(layer, j)].T
            c = math.sqrt(share / float((part**2).sum(1).mean()))
            weights[(layer, j)] = weights[(layer, j)] * c
            block_scales[(layer, j)] = c
            parts.append(part * c)
        s_l = sum(parts)
        assert isinstance(s_l, torch.Tensor)
        c_l = math.sqrt(k_l / float((s_l**2).sum(1).mean()))
        for j in graph[layer]:
            weights[(layer, j)] = weights[(layer, j)] * c_l
        layer_scales[layer] = c_l
        gs.append((s_l * c_l) ** 2)
    alphas = [p.gamma ** (layer - 2) for layer in range(2, p.L + 1)]
    g_star = sum(a * gs[layer].sum(1) for a, layer in zip(alphas, range(2, p.L + 1), strict=True))
    assert isinstance(g_star, torch.Tensor)
    y_scale = float(g_star.std())
    return Target(p.d, p.L, ks, graph, weights, alphas, y_scale, block_scales, layer_scales)


def variance_shares(terms: torch.Tensor) -> list[float]:
    """Var(alpha_l Sum G*_l) / Var(y) per layer (spec 1.7; they need not sum to 1: covariances)."""
    var_y = float(terms.sum(1).var())
    return [float(terms[:, i].var()) / var_y for i in range(terms.shape[1])]


def kurtosis(v: torch.Tensor) -> float:
    c = v - v.mean()
    return float((c**4).mean() / (c**2).mean() ** 2)
