"""hierarchical: feature errors (orthogonal Procrustes and linear), weight correlations and
INITIAL-DISTILL as exact identities."""

from __future__ import annotations

import pytest
import torch

from tasks.common import generator, haar_orthogonal
from tasks.hierarchical.metrics import fe_lin, fe_orth, gram_change, nmse, row_cosine
from tasks.hierarchical.wk_model import initial_distill


def gauss(n: int, k: int, tag: str) -> torch.Tensor:
    return torch.randn(n, k, generator=generator(0, tag), dtype=torch.float64)


def test_feature_error_is_zero_for_a_rotated_copy() -> None:
    s_true = gauss(2000, 5, "s") + 0.5  # features need not be centred
    u = haar_orthogonal(5, generator(1, "u"))
    s = s_true @ u  # rows S U, i.e. S = U^T S* per sample
    assert fe_orth(s_true, s) == pytest.approx(0.0, abs=1e-10)
    assert fe_lin(s_true, s) == pytest.approx(0.0, abs=1e-10)
    # any invertible linear map: the linear error is zero, the orthogonal one is not
    a = gauss(5, 5, "a")
    assert fe_lin(s_true, s_true @ a) == pytest.approx(0.0, abs=1e-10)
    assert fe_orth(s_true, s_true @ a) > 0.1


def test_feature_error_is_one_for_independent_features() -> None:
    """Independent features explain nothing: the linear error is 1 (up to k/n), the orthogonal one is
    1 + E||S||^2/E||S*||^2 (no rotation can align them; exactly 1 for S = 0)."""
    n, k = 40_000, 4
    s_true, s = gauss(n, k, "s"), gauss(n, k, "t")
    assert fe_lin(s_true, s) == pytest.approx(1.0, abs=3 * k / n + 2e-3)
    assert fe_lin(s_true, 0.01 * s) == pytest.approx(1.0, abs=3 * k / n + 2e-3)
    assert fe_orth(s_true, 0.01 * s) == pytest.approx(1.0, abs=2e-3)
    assert fe_orth(s_true, s) == pytest.approx(2.0, abs=0.03)
    assert fe_orth(s_true, torch.zeros_like(s)) == 1.0 and fe_lin(s_true, torch.zeros_like(s)) == 1.0


def test_orthogonal_error_is_the_procrustes_minimum() -> None:
    """No orthogonal U does better than the closed form; random rotations never beat it."""
    s_true, noise = gauss(500, 3, "s"), gauss(500, 3, "n")
    s = s_true @ haar_orthogonal(3, generator(2, "u")) + 0.3 * noise
    best = fe_orth(s_true, s)
    denom = float((s_true**2).sum())
    for i in range(50):
        u = haar_orthogonal(3, generator(i, "try"))
        assert float(((s_true - s @ u) ** 2).sum()) / denom >= best - 1e-12
    u, _, vh = torch.linalg.svd(s.T @ s_true)
    assert float(((s_true - s @ (u @ vh)) ** 2).sum()) / denom == pytest.approx(best, rel=1e-10)


def test_nmse_and_weight_correlations() -> None:
    y = gauss(1000, 1, "y").squeeze(1)
    assert nmse(y, y) == 0.0 and nmse(torch.zeros_like(y), y) == pytest.approx(float((y**2).mean() / y.var()))
    w = gauss(6, 4, "w")
    assert row_cosine(w, 3.0 * w) == pytest.approx(1.0) and row_cosine(w, -w) == pytest.approx(-1.0)
    assert gram_change(w, w) == 0.0
    assert gram_change(w @ haar_orthogonal(4, generator(0, "q")), w) > 0.0
    # a rotation of the neurons (rows) leaves W^T W unchanged
    assert gram_change(haar_orthogonal(6, generator(0, "r")) @ w, w) == pytest.approx(0.0, abs=1e-12)


def test_initial_distill_reproduces_the_cross_gram_at_rank_k() -> None:
    """K_{<|}^T K_{l-1} = the top-k_l SVD of W_{<|}^T W_{l-1} (Algorithm 1, lines 21-23): exact when
    the cross term has rank <= k_l."""
    k, split, q = 3, 5, 4
    a, b = gauss(k, split, "a"), gauss(k, q, "b")
    w = torch.cat([a, b], dim=1)  # W with k rows: its cross term a^T b has rank k
    kk = initial_distill(w, split, k)
    assert kk.shape == (k, split + q)
    assert torch.allclose(kk[:, :split].T @ kk[:, split:], a.T @ b, atol=1e-10)
    # at a lower rank it is the best rank-2 approximation (Eckart-Young)
    k2 = initial_distill(w, split, 2)
    u, s, vh = torch.linalg.svd(a.T @ b)
    assert torch.allclose(k2[:, :split].T @ k2[:, split:], (u[:, :2] * s[:2]) @ vh[:2], atol=1e-10)
