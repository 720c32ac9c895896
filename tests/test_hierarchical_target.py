"""hierarchical: the target generator of spec 1.7 (skip graph, normalisation, variance shares) and the
exact embedding of the target in the K/W learner (spec 2.2: R^T R = I, W = K = W* gives F = G*)."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import TypeAdapter, ValidationError

from tasks.common import generator
from tasks.hierarchical.params import HierarchicalParams, TargetFields, WKParams
from tasks.hierarchical.target import (
    kurtosis,
    make_target,
    sample_inputs,
    skip_graph,
    variance_shares,
)
from tasks.hierarchical.wk_model import WKNet, forward, output, q_dim, target_as_learner

ADAPTER = TypeAdapter(HierarchicalParams)


def params(**kw: object) -> WKParams:
    base = {"learner": "wk", "d": 10, "n_mc": 100_000, "n_train": 200, "n_val": 50, "n_test": 200}
    p = ADAPTER.validate_python({**base, **kw})
    assert isinstance(p, WKParams)
    return p


def test_skip_graph_follows_the_rules_of_section_1_2() -> None:
    for j_type in ("resnet", "input"):
        g = skip_graph(5, j_type)
        assert g[2] == [0, 1] and g[3] == [0, 2]
        for layer in range(3, 6):
            assert g[layer][-1] == layer - 1  # a link to the previous layer, listed last
            assert layer - 2 not in g[layer] and len(g[layer]) >= 2  # no l-2 link, at least one skip
    assert skip_graph(5, "resnet")[5] == [2, 4] and skip_graph(5, "input")[5] == [0, 4]


def test_resolved_defaults_and_bad_params_are_rejected() -> None:
    assert params(L=4).k == [6, 4, 3]
    assert params(L=4) == params(L=4, k=[6, 4, 3])
    assert params(optimizer="sgd").momentum == 0.9 and params().momentum is None
    for bad in (
        {"L": 3, "k": [6, 4, 3]},
        {"L": 3, "k": [3, 4]},
        {"d": 4, "L": 2, "k": [6]},
        {"protocol": "window"},
        {"window": 1},
        {"protocol": "all_from_start", "k_start": "distill"},
        {"batch": 500},
        {"gamma": 0.0},
        {"momentum": 0.5},
        {"lam_ratios": [1.0, 1.0]},
    ):
        with pytest.raises(ValidationError):
            params(**bad)
    with pytest.raises(ValidationError):
        ADAPTER.validate_python({"learner": "kernel", "kernel": "ntk", "degree": 4})


@pytest.mark.parametrize("dist", ["uniform", "gaussian"])
def test_normalisation_holds_on_fresh_inputs(dist: str) -> None:
    p = params(L=3, k=[4, 3], dist=dist)
    target = make_target(p)
    x = sample_inputs(200_000, p.d, dist, generator(123, "fresh"))
    feats = target.features(x)
    for layer in (2, 3):
        ratio = float((feats[layer] ** 2).sum(1).mean()) / target.k(layer)  # B_l = k_l
        assert abs(ratio - 1.0) < (0.03 if dist == "uniform" else 0.1), (layer, ratio)
    var_y = float(target.y(x).var())
    assert abs(var_y - 1.0) < (0.03 if dist == "uniform" else 0.25)
    # on the normalisation sample itself the constants are exact
    xs = sample_inputs(p.n_mc, p.d, dist, generator(p.tseed(), "hierarchical", "normalisation"))
    assert float(target.y(xs).std()) == pytest.approx(1.0, rel=1e-9)
    for layer in (2, 3):
        assert float((target.features(xs)[layer] ** 2).sum(1).mean()) == pytest.approx(target.k(layer), rel=1e-9)


def test_variance_shares_scale_with_gamma_squared_and_match_the_terms() -> None:
    """W* and its normalisation do not depend on gamma, so Var(alpha_3 Sum G*_3) / Var(alpha_2 Sum G*_2)
    is exactly gamma^2 times a gamma-free constant."""
    x = sample_inputs(20_000, 10, "uniform", generator(5, "x"))
    ratios = []
    for gamma in (0.1, 0.5):
        target = make_target(params(L=3, k=[4, 3], gamma=gamma, n_mc=20_000))
        terms = target.layer_terms(x)
        shares = variance_shares(terms)
        cov = float(torch.cov(terms.T)[0, 1]) / float(terms.sum(1).var())
        assert sum(shares) + 2 * cov == pytest.approx(1.0, rel=1e-9)
        assert target.alphas == [1.0, gamma]
        ratios.append(shares[1] / shares[0] / gamma**2)
    assert ratios[0] == pytest.approx(ratios[1], rel=1e-9)


def test_uniform_inputs_have_lighter_tails_than_gaussian() -> None:
    kurt = {}
    for dist in ("uniform", "gaussian"):
        p = params(L=3, k=[4, 3], dist=dist, n_mc=50_000)
        target = make_target(p)
        x = sample_inputs(50_000, p.d, dist, generator(1, "k"))
        kurt[dist] = kurtosis(target.y(x))
    assert kurt["uniform"] < kurt["gaussian"]


def test_target_seed_alone_fixes_the_target() -> None:
    a = make_target(params(seed=1, target_seed=7, n_mc=5000))
    b = make_target(params(seed=2, target_seed=7, n_mc=5000))
    c = make_target(params(seed=1, n_mc=5000))
    assert all(torch.equal(a.weights[key], b.weights[key]) for key in a.weights)
    assert not torch.equal(a.weights[(2, 1)], c.weights[(2, 1)])


@pytest.mark.parametrize(("depth", "j_type"), [(3, "resnet"), (4, "resnet"), (4, "input")])
def test_learner_with_orthonormal_r_and_w_equal_k_equal_target_is_the_target(depth: int, j_type: str) -> None:
    p = params(L=depth, j_type=j_type, n_mc=5000)
    target = make_target(p)
    net = target_as_learner(target, m=8)
    for j, r in net.r.items():
        assert torch.allclose(r.T @ r, torch.eye(target.k(j), dtype=r.dtype))  # R^T R = I
    x = sample_inputs(500, p.d, "gaussian", generator(3, "x"))
    assert torch.allclose(output(net, x, depth), target.y(x), rtol=1e-12, atol=1e-12)
    _, feats = forward(net, x, depth)
    true = target.features(x)
    for layer in range(2, depth + 1):
        assert torch.allclose(feats[layer - 2], true[layer], rtol=1e-12, atol=1e-12)


def sym_square(r: torch.Tensor) -> torch.Tensor:
    """R * R of spec 2.2: sigma(R z) = (R * R)(z * z), [z * z]_{i<=j} = a_ij z_i z_j, a_ii = 1, a_ij = sqrt 2."""
    k = r.shape[1]
    cols = []
    for i in range(k):
        for j in range(i, k):
            cols.append(r[:, i] ** 2 if i == j else math.sqrt(2.0) * r[:, i] * r[:, j])
    return torch.stack(cols, dim=1)


def test_learner_with_a_random_r_represents_the_target_exactly() -> None:
    """With a Gaussian R (no R^T R = I), K_{l,j} = W*_{l,j} E (R_j * R_j)^{-1} (E picks the diagonal
    pairs) still gives F = G*: the learner's class contains the target (symmetric-tensor identity)."""
    p = params(L=3, k=[3, 2], d=6, n_mc=5000)
    target = make_target(p)
    net = target_as_learner(target, m=5)
    g = generator(0, "R")
    ks = target.ks
    for j in (2, 3):
        k = ks[j - 2]
        r = torch.randn(q_dim(j, p.d, ks), k, generator=g, dtype=torch.float64) / k
        net.r[j] = r
        select = torch.zeros(k, r.shape[0], dtype=torch.float64)
        pos = 0
        for i in range(k):
            for jj in range(i, k):
                if i == jj:
                    select[i, pos] = 1.0
                pos += 1
        proj = select @ torch.linalg.inv(sym_square(r))
        for layer in (3,):
            if j in target.graph[layer]:
                cols = net.blocks(layer)
                for jb, a, b in cols:
                    if jb == j:
                        net.k[layer][:, a:b] = target.weights[(layer, j)] @ proj
                        net.w[layer][: ks[layer - 2], a:b] = net.k[layer][:, a:b]
    x = sample_inputs(300, p.d, "uniform", generator(4, "x"))
    assert torch.allclose(output(net, x, 3), target.y(x), rtol=1e-8, atol=1e-8)
    assert isinstance(net, WKNet)


def test_target_fields_are_shared_by_every_learner() -> None:
    for learner in ("wk", "densenet", "kernel"):
        p = ADAPTER.validate_python({"learner": learner})
        assert isinstance(p, TargetFields) and p.d == 20 and p.k == [6, 4]
