"""Ridge-regression baselines of claim C6 (Appendix I: kernels and feature maps need d^{Omega(2^{L-1})}
samples). Polynomial kernel (1 + <x,x'>/d)^p, the NTK of a 2-layer ReLU net (both layers trained),
and ReLU random features. The ridge is picked on the validation split from `ridge_grid` (relative to
the mean diagonal of the train Gram), the test error reported at that ridge."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from tasks.common import generator, torch_dtype
from tasks.hierarchical.data import Data
from tasks.hierarchical.metrics import median_se, nmse
from tasks.hierarchical.params import KernelParams


def poly_kernel(a: torch.Tensor, b: torch.Tensor, degree: int) -> torch.Tensor:
    return (1.0 + a @ b.T / a.shape[1]) ** degree


def ntk_relu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """NTK of f(x) = m^{-1/2} sum_i v_i relu(<w_i, x>/sqrt d), w ~ N(0, I), v ~ N(0, 1), both trained:
    <x,x'>/d kappa_0(theta) + |x||x'|/d kappa_1(theta), kappa_0 = (pi - theta)/(2 pi),
    kappa_1 = (sin theta + (pi - theta) cos theta)/(2 pi)."""
    d = a.shape[1]
    na, nb = a.norm(dim=1, keepdim=True), b.norm(dim=1, keepdim=True)
    dot = a @ b.T
    cos = (dot / (na * nb.T)).clamp(-1.0, 1.0)
    theta = torch.arccos(cos)
    k0 = (math.pi - theta) / (2 * math.pi)
    k1 = (torch.sin(theta) + (math.pi - theta) * cos) / (2 * math.pi)
    return dot / d * k0 + (na * nb.T) / d * k1


def by_rows(
    kern: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], a: torch.Tensor, b: torch.Tensor, rows: int = 2048
) -> torch.Tensor:
    """kern(a, b) computed on blocks of `rows` rows of a: the NTK forms ~6 temporaries of the output's size,
    which at 2e4 test x 8e3 train points would be ~8 GB at once instead of one output matrix."""
    return torch.cat([kern(a[i : i + rows], b) for i in range(0, a.shape[0], rows)])


def relu_features(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w.T / math.sqrt(x.shape[1]) + bias) * math.sqrt(2.0 / w.shape[0])


def run_kernel(p: KernelParams, data: Data, device: str) -> tuple[dict[str, Any], float]:
    """(summary, flops). Every ridge of the grid is solved and scored on the validation split; train and
    test predictions are made once, for the chosen ridge."""
    dt = torch_dtype(p.dtype)
    xtr, ytr = data.train.x.to(device, dt), data.train.y.to(device, dt)
    xva, xte = data.val.x.to(device, dt), data.test.x.to(device, dt)
    n, d = xtr.shape
    n_va, n_te = xva.shape[0], xte.shape[0]
    flops = 0.0
    if p.kernel == "rf":
        assert p.n_features is not None
        g = generator(p.iseed(), "hierarchical", "rf")
        w = torch.randn(p.n_features, d, generator=g, dtype=torch.float64).to(device, dt)
        bias = torch.randn(p.n_features, generator=g, dtype=torch.float64).to(device, dt)
        ftr, fva, fte = (relu_features(x, w, bias) for x in (xtr, xva, xte))
        gram = ftr.T @ ftr  # primal form: D x D
        rhs = ftr.T @ ytr
        size = p.n_features
        flops += 2.0 * (n + n_va + n_te) * d * size + 2.0 * n * size * size

        def predict(coef: torch.Tensor, split: str) -> torch.Tensor:
            return {"train": ftr, "val": fva, "test": fte}[split] @ coef

    else:

        def kern(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            if p.kernel == "poly":
                assert p.degree is not None
                return poly_kernel(a, b, p.degree)
            return ntk_relu(a, b)

        gram = by_rows(kern, xtr, xtr)
        kva = by_rows(kern, xva, xtr)
        rhs = ytr
        size = n
        flops += 2.0 * (n + n_va) * n * d

        def predict(coef: torch.Tensor, split: str) -> torch.Tensor:
            if split == "test":
                # the test Gram is never formed whole: at n = 2e4 it would be another 3.2 GB beside the
                # train Gram and its factor
                return torch.cat([by_rows(kern, xte[i : i + 2048], xtr) @ coef for i in range(0, n_te, 2048)])
            return {"train": gram, "val": kva}[split] @ coef

    def solve(lam: float) -> torch.Tensor:
        a = gram.clone()
        a.diagonal().add_(lam)
        factor = torch.linalg.cholesky(a, out=a)  # in place: one size x size copy beside the Gram, not two
        return torch.cholesky_solve(rhs.unsqueeze(1), factor).squeeze(1)

    scale = float(gram.diagonal().mean())
    best: tuple[float, float, torch.Tensor] | None = None  # (validation error, relative ridge, coefficients)
    for rel in p.ridge_grid:
        try:
            coef = solve(rel * scale)
        except torch.linalg.LinAlgError:
            continue  # too small a ridge for this precision: the Gram is numerically singular
        flops += size**3 / 3.0 + 2.0 * size * n_va
        val = nmse(predict(coef, "val").cpu(), data.val.y)
        if math.isfinite(val) and (best is None or val < best[0]):
            best = (val, rel, coef)
    summary: dict[str, Any]
    if best is None:
        summary = {"val_mse": math.inf, "test_mse": math.inf, "train_mse": math.inf, "test_median_se": math.inf}
        summary["ridge"] = math.nan
    else:
        val, rel, coef = best
        ptr, pte = predict(coef, "train").cpu(), predict(coef, "test").cpu()
        flops += 2.0 * size * (n + n_te) + (0.0 if p.kernel == "rf" else 2.0 * n_te * n * d)
        summary = {
            "val_mse": val,
            "test_mse": nmse(pte, data.test.y),
            "train_mse": nmse(ptr, data.train.y),
            "test_median_se": median_se(pte, data.test.y),
            "ridge": rel,
        }
    summary["n_monomials"] = float(math.comb(d + (p.degree or 0), p.degree or 0)) if p.kernel == "poly" else math.nan
    return summary, flops
