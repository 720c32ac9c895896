"""deep_linear: the initialisation schemes of Sec. 2.3 (shapes, padding, seeding across widths)."""

from __future__ import annotations

import pytest
import torch

from tasks.common import generator
from tasks.deep_linear.init import (
    balanced,
    end_to_end,
    identity,
    init_weights,
    init_weights_many,
    orth_identity,
    orthogonal,
    random_gaussian,
)

WIDTHS = [12, 20, 20, 7, 30, 5]  # d_in = 12, d_out = 5, one layer narrower than both


def is_orthogonal(q: torch.Tensor) -> bool:
    return torch.allclose(q.T @ q, torch.eye(q.shape[0], dtype=q.dtype), atol=1e-12)


@pytest.mark.parametrize("name", ["orth_identity", "orthogonal", "identity", "balanced", "random"])
def test_shapes(name):
    widths = [12, 20, 20, 12, 30, 5] if name == "balanced" else WIDTHS
    ws = init_weights(name, widths, 3, torch.float64)
    assert [tuple(w.shape) for w in ws] == [(widths[j], widths[j - 1]) for j in range(1, len(widths))]


def test_orthogonal_is_zero_padded_square_haar():
    for j, w in enumerate(orthogonal(WIDTHS, 1), start=1):
        k = min(WIDTHS[j], WIDTHS[j - 1])
        assert is_orthogonal(w[:k, :k])
        assert w[k:].abs().sum() == 0 and w[:, k:].abs().sum() == 0


def test_orth_identity_block_and_unit_diagonal():
    cap = max(WIDTHS[0], WIDTHS[-1])
    for w in orth_identity(WIDTHS, 1):
        n_out, n_in = w.shape
        k = min(n_out, n_in, cap)
        assert is_orthogonal(w[:k, :k])
        rest = w.clone()
        rest[:k, :k] = 0
        expect = torch.eye(n_out, n_in, dtype=w.dtype)
        expect[:k, :k] = 0
        assert torch.equal(rest, expect)  # ones on the rest of the diagonal, zeros elsewhere


def test_orth_identity_equals_orthogonal_when_no_width_exceeds_max_dims():
    widths = [16, 16, 10, 16, 4]  # every width <= max(16, 4)
    for a, b in zip(orth_identity(widths, 7), orthogonal(widths, 7), strict=True):
        assert torch.equal(a, b)
    wide = [16, 24, 24, 4]
    assert not all(torch.equal(a, b) for a, b in zip(orth_identity(wide, 7), orthogonal(wide, 7), strict=True))


def test_orth_identity_depth_one_and_narrow_first_layer():
    (w,) = orth_identity([10, 3], 0)  # L = 1, d_out < d_in: W_1 = [Q_3 0]
    assert is_orthogonal(w[:, :3]) and w[:, 3:].abs().sum() == 0
    w1 = orth_identity([128, 20, 20, 20], 0)[0]  # spec G14, Fig. 5 Arch 1: W_1 = [Q_20 0]
    assert is_orthogonal(w1[:, :20]) and w1[:, 20:].abs().sum() == 0


def test_layer_draws_do_not_depend_on_width():
    """Spec G4: Q_k of layer j comes from a generator keyed on (seed, j) only."""
    narrow = orth_identity([16, 16, 16, 16, 4], 11)
    wide = orth_identity([16, 40, 40, 40, 4], 11)
    for a, b in zip(narrow, wide, strict=True):
        k_out, k_in = a.shape
        assert torch.equal(a[: min(k_out, 16), : min(k_in, 16)], b[: min(k_out, 16), : min(k_in, 16)])
    assert torch.equal(end_to_end(narrow), end_to_end(wide))


def test_identity_is_eye():
    for j, w in enumerate(identity(WIDTHS), start=1):
        assert torch.equal(w, torch.eye(WIDTHS[j], WIDTHS[j - 1], dtype=torch.float64))


def test_balanced_product_and_balancedness():
    widths = [9, 14, 14, 14, 4]
    ws = balanced(widths, 2, None)
    w0 = torch.randn(4, 9, generator=generator(2, "deep_linear", "init_balanced"), dtype=torch.float64) / 3.0
    assert torch.allclose(end_to_end(ws), w0, atol=1e-12)
    for j in range(len(ws) - 1):  # W_{j+1}^T W_{j+1} = W_j W_j^T (Arora et al.)
        assert torch.allclose(ws[j + 1].T @ ws[j + 1], ws[j] @ ws[j].T, atol=1e-12)
    assert torch.equal(end_to_end(balanced(widths, 2, None)), end_to_end(balanced([9, 30, 30, 30, 4], 2, None)))


def test_random_fan_in_scale_and_width_dependence():
    ws = random_gaussian([400, 300, 10], 0, None)
    assert float(ws[0].std()) == pytest.approx(1 / 400**0.5, rel=0.02)
    assert float(ws[1].std()) == pytest.approx(1 / 300**0.5, rel=0.1)
    assert float(random_gaussian([50, 60], 0, 0.5)[0].std()) == pytest.approx(0.5, rel=0.05)


@pytest.mark.parametrize("name", ["orth_identity", "orthogonal", "identity", "balanced", "random"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_many_seeds_drawn_together_are_each_seed_alone_bit_for_bit(name: str, dtype: torch.dtype) -> None:
    """A batch draws its members' orthogonal layers in one QR over the stack: each member must still get
    exactly the tensors its single run draws (the batched learners promise the single run's numbers)."""
    # square blocks of 12, 7 and 5 (WIDTHS), and of 16 and 8 (one stacked QR, and one matrix at a time)
    widths = [12, 20, 20, 12, 30, 5] if name == "balanced" else WIDTHS if dtype == torch.float64 else [16] * 4 + [8]
    seeds = [0, 7, 3, 7, 123456]
    many = init_weights_many(name, widths, seeds, dtype)
    assert len(many) == len(seeds)
    for seed, ws in zip(seeds, many, strict=True):
        alone = init_weights(name, widths, seed, dtype)
        assert len(ws) == len(alone)
        for w, a in zip(ws, alone, strict=True):
            assert w.dtype == a.dtype and w.shape == a.shape
            assert torch.equal(w, a)
