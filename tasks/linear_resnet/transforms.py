"""The fixed input/output transforms A (m x d) and B (k x m) of paper 003 (Sec. 3.1 and 4).

- gaussian: A_ij ~ N(0, a_var), B_ij ~ N(0, b_var). The paper's prose uses 1/m and 1/k (our
  defaults); its corollaries use 1 and 1 (spec gotcha 3), hence variances as params.
- identity: A = [I_d; 0], B = sqrt(m/k) [I_k, 0] (Sec. 4). Only the first max(d, k) hidden
  coordinates ever move, so the width is inert and GD can get stuck (Bartlett et al. 2019).
- modified_identity: A has columns e_0..e_{d-1}, B has rows alpha e_d..alpha e_{d+k-1}: disjoint
  supports, so B A = 0 and the initial output is 0 (L0 = ||Y||^2 / 2). Needs m >= d + k.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasks.common import generator
from tasks.linear_resnet.params import LinearResNetCommon

F64 = torch.float64


@dataclass(frozen=True)
class Transforms:
    a: torch.Tensor  # m x d
    b: torch.Tensor  # k x m
    lam_a: float  # ||A||_2
    mu_a: float  # sigma_min(A) (the d-th singular value; m >= d)
    lam_b: float
    mu_b: float  # the k-th singular value of B (m >= k)


def make_transforms(p: LinearResNetCommon) -> Transforms:
    m, d, k = p.m, p.d, p.k
    if p.transform == "gaussian":
        seed = p.seed if p.ab_seed is None else p.ab_seed
        assert p.a_var is not None and p.b_var is not None  # filled by the params validator
        # Separate streams for A and B: the same seed gives the same A whatever k is, and vice versa.
        a = torch.randn(m, d, generator=generator(seed, "linear_resnet", "A"), dtype=F64) * p.a_var**0.5
        b = torch.randn(k, m, generator=generator(seed, "linear_resnet", "B"), dtype=F64) * p.b_var**0.5
    elif p.transform == "identity":
        a = torch.eye(m, d, dtype=F64)
        b = (m / k) ** 0.5 * torch.eye(k, m, dtype=F64)
    else:
        assert p.alpha is not None
        a = torch.zeros(m, d, dtype=F64)
        a[torch.arange(d), torch.arange(d)] = 1.0  # S1 = {0..d-1}
        b = torch.zeros(k, m, dtype=F64)
        b[torch.arange(k), d + torch.arange(k)] = p.alpha  # S2 = {d..d+k-1}
    sa = torch.linalg.svdvals(a)
    sb = torch.linalg.svdvals(b)
    return Transforms(a=a, b=b, lam_a=float(sa[0]), mu_a=float(sa[-1]), lam_b=float(sb[0]), mu_b=float(sb[-1]))
