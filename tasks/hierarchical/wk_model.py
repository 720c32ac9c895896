"""The re-parameterised learner of spec 2.2 as plain torch functions.

Per layer l = 2..L the columns of K_l (k_l x Q_l) and W_l (m x Q_l) are the blocks j in J_l in the
order of `skip_graph` (skip blocks first, the l-1 block last), so K_{l,<|} and K_{l,l-1} are column
slices. With h_0 = x, h_1 = x∘x - mean_train(x∘x) and h_j = act(R_j S_j) for j >= 2:
    S_l = K_l [h_j]_{j in J_l}          (k_l)   the features passed on: only the K-path feeds forward
    F_l = (W_l [h_j]_{j in J_l})^2      (m)     the layer's output, never fed forward
    F   = sum_l alpha_eff_l Sum(F_l)
act is z^2, or (B tanh(z/B))^2 for the truncated training activation (spec 2.3, the prototype's
smooth stand-in for sigma~); the outer square of F_l is never truncated.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tasks.hierarchical.target import Target


def q_dim(j: int, d: int, ks: list[int]) -> int:
    """Dimension of h_j: d for j in {0, 1}, binom(k_j + 1, 2) for j >= 2."""
    if j < 2:
        return d
    k = ks[j - 2]
    return k * (k + 1) // 2


@dataclass
class WKNet:
    """Parameters and structure of the learner (tensors are leaves; R is fixed)."""

    d: int
    ks: list[int]
    m: int
    graph: dict[int, list[int]]
    alphas: list[float]  # alpha_eff_2..alpha_eff_L (true alphas over y_scale)
    r: dict[int, torch.Tensor]  # j >= 2 -> R_j (q_j x k_j)
    k: dict[int, torch.Tensor]  # l -> K_l (k_l x Q_l)
    w: dict[int, torch.Tensor]  # l -> W_l (m x Q_l)
    mean_sq: torch.Tensor  # train mean of x∘x (footnote 8)
    trunc: dict[int, float] | None = None  # j -> B_j of the truncated activation (None: plain square)

    @property
    def depth(self) -> int:
        return len(self.ks) + 1

    def blocks(self, layer: int) -> list[tuple[int, int, int]]:
        """(j, start, stop) column ranges of the blocks of layer l."""
        out, start = [], 0
        for j in self.graph[layer]:
            q = q_dim(j, self.d, self.ks)
            out.append((j, start, start + q))
            start += q
        return out

    def split(self, layer: int) -> int:
        """First column of the l-1 block (columns before it are K_{l,<|})."""
        return self.blocks(layer)[-1][1]

    def tensors(self) -> list[torch.Tensor]:
        return [*self.k.values(), *self.w.values()]


def act(z: torch.Tensor, bound: float | None) -> torch.Tensor:
    if bound is None:
        return z * z
    t = bound * torch.tanh(z / bound)
    return t * t


def forward(net: WKNet, x: torch.Tensor, top: int, truncated: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(terms, [S_2, ..., S_top]) on the rows of x, where terms (n x (top-1)) holds the output terms
    alpha_eff_l Sum(F_l) of layers 2..top: F(x) = terms.sum(1) with only those layers in the output."""
    h: dict[int, torch.Tensor] = {0: x, 1: x * x - net.mean_sq}
    feats: list[torch.Tensor] = []
    terms: list[torch.Tensor] = []
    for layer in range(2, top + 1):
        hcat = torch.cat([h[j] for j in net.graph[layer]], dim=1)
        s = hcat @ net.k[layer].T
        feats.append(s)
        pre = hcat @ net.w[layer].T
        terms.append(net.alphas[layer - 2] * (pre * pre).sum(1))
        if layer < top:
            bound = net.trunc.get(layer) if (truncated and net.trunc is not None) else None
            h[layer] = act(s @ net.r[layer].T, bound)
    return torch.stack(terms, dim=1), feats


def output(net: WKNet, x: torch.Tensor, top: int, truncated: bool = False) -> torch.Tensor:
    """F(x) with layers 2..top in the output."""
    return forward(net, x, top, truncated)[0].sum(1)


def _gram_gap(a1: torch.Tensor, a2: torch.Tensor, b1: torch.Tensor, b2: torch.Tensor) -> torch.Tensor:
    """||a1^T a2 - b1^T b2||_F^2 (K-side a, W-side b)."""
    diff = a1.T @ a2 - b1.T @ b2
    return (diff * diff).sum()


def distill_terms(net: WKNet, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The lam3, lam4, lam5 terms of spec 2.4 for layer l (unweighted)."""
    kk, ww = net.k[layer], net.w[layer]
    c = net.split(layer)
    k_skip, k_prev, w_skip, w_prev = kk[:, :c], kk[:, c:], ww[:, :c], ww[:, c:]
    return (
        _gram_gap(k_prev, k_skip, w_prev, w_skip),
        _gram_gap(k_prev, k_prev, w_prev, w_prev),
        _gram_gap(kk, kk, ww, ww),
    )


def reg_gap(net: WKNet, layer: int) -> float:
    """||K_l^T K_l - W_l^T W_l||_F / ||W_l^T W_l||_F (distillation quality; spec 3.10 reg_gap_l)."""
    with torch.no_grad():
        ww = net.w[layer].T @ net.w[layer]
        gap = net.k[layer].T @ net.k[layer] - ww
        denom = float(torch.linalg.norm(ww))
        return float(torch.linalg.norm(gap)) / denom if denom > 0 else float("nan")


def initial_distill(w_l: torch.Tensor, split: int, k_l: int) -> torch.Tensor:
    """INITIAL-DISTILL (Algorithm 1, lines 21-23) with the true k_l: the top-k_l SVD
    U S V of W_{l,<|}^T W_{l,l-1}; K_{l,<|}^T = U S^{1/2}, K_{l,l-1} = S^{1/2} V."""
    cross = w_l[:, :split].T @ w_l[:, split:]
    u, s, vh = torch.linalg.svd(cross, full_matrices=False)
    # The SVD fixes each pair (u_i, v_i) only up to a common sign, and LAPACK and cuSOLVER choose
    # differently; K's row i flips with it, and the learner's output is not invariant to that. So the
    # sign is fixed here: the entry of u_i largest in magnitude is positive (as scikit-learn's svd_flip).
    sign = torch.sign(u.gather(0, u.abs().argmax(0, keepdim=True))).squeeze(0)
    sign = torch.where(sign == 0, torch.ones_like(sign), sign)
    u, vh = u * sign, vh * sign.unsqueeze(1)
    r = min(k_l, s.shape[0])
    root = s[:r].sqrt()
    k_skip = (u[:, :r] * root).T
    k_prev = root.unsqueeze(1) * vh[:r]
    out = torch.zeros(k_l, w_l.shape[1], dtype=w_l.dtype, device=w_l.device)
    out[:r, :split] = k_skip
    out[:r, split:] = k_prev
    return out


def target_as_learner(target: Target, m: int, dtype: torch.dtype = torch.float64) -> WKNet:
    """The exact embedding of the target in the learner (spec 2.2: R^T R = I, W = K = W*):
    R_j = [I_k; 0] so that sigma(R_j S_j) = [S_j^2; 0], K_{l,j} = [W*_{l,j}, 0] and W_l = K_l padded
    with zero rows to width m (needs m >= k_l). Used by tests: its F equals G* exactly."""
    ks, d = target.ks, target.d
    r = {}
    for j in range(2, target.depth + 1):
        q = q_dim(j, d, ks)
        rj = torch.zeros(q, ks[j - 2], dtype=dtype)
        rj[: ks[j - 2]] = torch.eye(ks[j - 2], dtype=dtype)
        r[j] = rj
    kd, wd = {}, {}
    for layer in range(2, target.depth + 1):
        cols = []
        for j in target.graph[layer]:
            block = target.weights[(layer, j)].to(dtype)
            q = q_dim(j, d, ks)
            cols.append(torch.cat([block, torch.zeros(block.shape[0], q - block.shape[1], dtype=dtype)], dim=1))
        kl = torch.cat(cols, dim=1)
        kd[layer] = kl
        wl = torch.zeros(m, kl.shape[1], dtype=dtype)
        wl[: kl.shape[0]] = kl
        wd[layer] = wl
    alphas = [target.alpha_eff(layer) for layer in range(2, target.depth + 1)]
    return WKNet(d, ks, m, target.graph, alphas, r, kd, wd, torch.ones(d, dtype=dtype))
