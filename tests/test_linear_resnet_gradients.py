"""Closed-form gradients of the linear ResNet / standard net against central finite differences of
the loss written straight from its definition (no autograd), and the Gram shortcut against the
direct (activation) form, both as functions and as whole runs."""

from __future__ import annotations

import pytest
import torch
from pydantic import TypeAdapter

from tasks.base import RunContext
from tasks.linear_resnet.model import direct_loss_grad, gram_batch_loss_grad, gram_excess_grad, sum_loss
from tasks.linear_resnet.task import LinearResNetTask

F64 = torch.float64
TASK = LinearResNetTask()
ADAPTER = TypeAdapter(TASK.Params)


def problem(seed: int, resnet: bool, rank: int | None = None) -> dict:
    g = torch.Generator().manual_seed(seed)
    d, k, m, depth, n = 3, 2, 5, 3, 7
    x = torch.randn(d, n, generator=g, dtype=F64)
    if rank is not None:  # rank-deficient X: the minimum-norm phi must still make the shortcut exact
        x = torch.randn(d, rank, generator=g, dtype=F64) @ torch.randn(rank, n, generator=g, dtype=F64)
    scale = 0.3 if resnet else 0.6
    return {
        "a": torch.randn(m, d, generator=g, dtype=F64),
        "b": torch.randn(k, m, generator=g, dtype=F64),
        "x": x,
        "y": torch.randn(k, n, generator=g, dtype=F64),
        "ws": [scale * torch.randn(m, m, generator=g, dtype=F64) for _ in range(depth)],
        "resnet": resnet,
    }


def least_squares(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, float]:
    phi = torch.linalg.lstsq(x.T, y.T, driver="gelsd").solution.T
    r = phi @ x - y
    return phi, 0.5 * float((r * r).sum())


def finite_difference(pr: dict, x: torch.Tensor, y: torch.Tensor, h: float = 1e-6) -> list[torch.Tensor]:
    """Central differences of 1/2 ||B V A X - Y||^2 in every entry of every W_l."""
    ws = [w.clone() for w in pr["ws"]]
    out = []
    for w in ws:
        g = torch.zeros_like(w)
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                old = float(w[i, j])
                w[i, j] = old + h
                up = float(sum_loss(ws, pr["a"], pr["b"], x, y, pr["resnet"]))
                w[i, j] = old - h
                down = float(sum_loss(ws, pr["a"], pr["b"], x, y, pr["resnet"]))
                w[i, j] = old
                g[i, j] = (up - down) / (2 * h)
        out.append(g)
    return out


def assert_grads_close(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    scale = max(float(g.abs().max()) for g in want)
    for g, f in zip(got, want, strict=True):
        assert float((g - f).abs().max()) <= 1e-6 * scale


@pytest.mark.parametrize("resnet", [True, False])
@pytest.mark.parametrize("rank", [None, 2])
def test_gram_gradient_matches_finite_differences(resnet: bool, rank: int | None) -> None:
    pr = problem(1, resnet, rank)
    phi, loss_star = least_squares(pr["x"], pr["y"])
    sigma = pr["x"] @ pr["x"].T
    excess, grads = gram_excess_grad(pr["ws"], pr["a"], pr["b"], sigma, phi, resnet)
    loss = float(sum_loss(pr["ws"], pr["a"], pr["b"], pr["x"], pr["y"], resnet))
    assert loss_star + float(excess) == pytest.approx(loss, rel=1e-12)
    assert_grads_close(grads, finite_difference(pr, pr["x"], pr["y"]))


@pytest.mark.parametrize("resnet", [True, False])
def test_direct_gradient_matches_finite_differences(resnet: bool) -> None:
    pr = problem(2, resnet)
    loss, out, grads = direct_loss_grad(pr["ws"], pr["a"] @ pr["x"], pr["b"], pr["y"], resnet)
    assert float(loss) == pytest.approx(
        float(sum_loss(pr["ws"], pr["a"], pr["b"], pr["x"], pr["y"], resnet)), rel=1e-12
    )
    assert_grads_close(grads, finite_difference(pr, pr["x"], pr["y"]))


@pytest.mark.parametrize("resnet", [True, False])
def test_batch_gradients_match_finite_differences(resnet: bool) -> None:
    """Per-batch Gram and direct forms: the gradient of the batch's loss (before the n/B factor)."""
    pr = problem(3, resnet)
    idx = torch.tensor([0, 3, 4, 6])
    xb, yb = pr["x"][:, idx], pr["y"][:, idx]
    want = finite_difference(pr, xb, yb)
    loss_ref = float(sum_loss(pr["ws"], pr["a"], pr["b"], xb, yb, resnet))
    loss_g, grads_g = gram_batch_loss_grad(pr["ws"], pr["a"], pr["b"], xb, yb, resnet)
    loss_d, _, grads_d = direct_loss_grad(pr["ws"], pr["a"] @ xb, pr["b"], yb, resnet)
    assert float(loss_g) == pytest.approx(loss_ref, rel=1e-10)
    assert float(loss_d) == pytest.approx(loss_ref, rel=1e-12)
    assert_grads_close(grads_g, want)
    assert_grads_close(grads_d, want)


@pytest.mark.parametrize(
    "cfg",
    [
        {"algo": "gd", "m": 20, "depth": 4, "n": 120},
        {"algo": "gd", "model": "standard", "m": 20, "depth": 4, "n": 120},
        {"algo": "gd", "transform": "modified_identity", "m": 24, "depth": 3, "n": 120, "alpha": 3.0},
        {"algo": "sgd", "m": 20, "depth": 4, "n": 120, "batch_size": 30},
        {"algo": "sgd", "model": "standard", "m": 20, "depth": 3, "n": 120, "batch_size": 40, "sampling": "reshuffle"},
    ],
)
def test_gram_shortcut_equals_direct_form_over_a_run(cfg: dict) -> None:
    """Same seeds, same batches: only the form differs, so the curves agree to rounding."""
    common = {**cfg, "n_iters": 60, "log_every": 5}
    gram = TASK.run(ADAPTER.validate_python({**common, "form": "gram"}), RunContext())
    direct = TASK.run(ADAPTER.validate_python({**common, "form": "direct"}), RunContext())
    assert gram.status == direct.status == "ok"
    assert gram.curve["step"] == direct.curve["step"]
    for key in ("loss", "grad_norm", "w_dist"):
        assert torch.allclose(torch.tensor(gram.curve[key]), torch.tensor(direct.curve[key]), rtol=1e-9, atol=0)
    # The suboptimality itself (computed without cancellation in both forms) agrees while it is large.
    sub_g, sub_d = torch.tensor(gram.curve["subopt"]), torch.tensor(direct.curve["subopt"])
    big = sub_g > 1e-6 * sub_g[0]
    assert torch.allclose(sub_g[big], sub_d[big], rtol=1e-7)
    assert gram.flops < direct.flops  # n = 120 > d + 2k: the shortcut is cheaper
