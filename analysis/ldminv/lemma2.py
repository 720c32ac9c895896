"""Lemma 2 (paper 000, App. C.1.1) on the very problem each theory_lemma2 run trained on (issue 43).

A run stores its parameters and learned C_1..C_K; its one training matrix is drawn again from its seed (the
learner's own data stream, tasks.ldminv), so the checks here read the layers' errors e_k on the training matrix
and the gradient of the training loss Eq. 4 anywhere in C: seconds of float64 on the exact spectral path.

The rules, fixed from the lemma's text before these numbers were read:
- order: the lemma's "C_k around 1 ... order L~ in (L, L+1]" is decided on the layers that trained (|C_k| >= 1/2,
  half way from their start at 0 to 1), for k < K; a layer whose C_k stayed near 0 is fixed D-Minv (order L by
  Lemma 1) and says nothing about learning. Orders within ORDER_TOL of the interval's ends are undecided.
- sign: D_[C_k] L < 0 for all C_k in [0, 1 + eps]: every component negative along each coordinate's scan over
  [0, 1] (the others at their start, 0) and along the diagonal C = t 1, t in [0, 1].
- flat at 1: D_[C_k] L ~ 0 for k in [K-1] when C_k ~ 1: at C = 1 within 1 % of the gradient at C = 0 holds,
  above 10 % does not, between is undecided.
- not a minimum: L(1 - h g/|g|) < L(1) for one h in STEPS holds; a gradient that vanishes to rounding with
  every coordinate probe going up does not; else undecided.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import torch

from analysis.claims import FAILS, HOLDS, NO_DATA, UNDECIDED, Verdict, VerdictText
from tasks.ldminv.data import Source
from tasks.ldminv.engine import Batch, Engine, eq4
from tasks.ldminv.params import MinvParams
from tasks.ldminv.train_minv import make_engine

ORDER_TOL = 0.05  # undecided band around the ends of (L, L+1]
TRAINED = 0.5  # |C_k| at least this far from its start (0) towards 1: the layer trained
SCAN = np.linspace(0.0, 1.0, 21)
STEPS = (1e-1, 1e-2, 1e-3, 1e-4)
F64 = torch.float64


def problem(params_json: str, split: str = "train") -> tuple[Engine, Batch, MinvParams]:
    """The engine and the training set (or test set) of a stored run with a fixed pool, drawn again from its
    seed as the learner drew it (each split has its own stream)."""
    p = MinvParams.model_validate(json.loads(params_json))
    engine = make_engine(p, "cpu")
    seed = p.seed if p.data_seed is None else p.data_seed
    n = p.n_test if split == "test" else p.n_train
    assert n is not None, "a run without a fixed training pool"
    return engine, engine.draw(Source(engine.spec, seed, split), n), p


def per_matrix_eq4(engine: Engine, batch: Batch, coeffs: np.ndarray) -> np.ndarray:
    """Eq. 4 of each matrix alone (its mean over the set is the set's Eq. 4)."""
    with torch.no_grad():
        layers = engine.losses(batch, torch.tensor(coeffs, dtype=F64))
    return (torch.stack(layers).sum(dim=0) / (2 * len(layers))).numpy()


def loss(engine: Engine, batch: Batch, coeffs: torch.Tensor) -> torch.Tensor:
    return eq4(engine.losses(batch, coeffs))


def gradient(engine: Engine, batch: Batch, coeffs: np.ndarray) -> np.ndarray:
    c = torch.tensor(coeffs, dtype=F64, requires_grad=True)
    loss(engine, batch, c).backward()
    assert c.grad is not None
    return c.grad.numpy().copy()


def layer_orders(engine: Engine, batch: Batch, coeffs: np.ndarray) -> list[float]:
    """log e_(k+1) / log e_k for k = 1..K-1 (layer k+1's order), e_k = max_j |e_kj| on the training matrix."""
    with torch.no_grad():
        es = [batch.start, *engine.spectral_layers(batch, torch.tensor(coeffs, dtype=F64))]
    worst = [float(e.abs().max()) for e in es]
    return [math.log(b) / math.log(a) if 0 < a < 1 and b > 0 else math.nan for a, b in itertools.pairwise(worst)]


def _warmup(runs: pd.DataFrame) -> pd.DataFrame:
    r = runs[(runs["algo"] == "minv") & (runs["model"] == "warmup") & (runs["iters"].astype(float) > 0)]
    return r[r["status"] == "ok"] if "status" in r else r


def _label(p: MinvParams) -> str:
    return f"{p.rows}x{p.cols} L={p.L} seed {p.seed}"


def order_on_trained_layers(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    """Lemma 2's order, decided on the layers whose C_k trained (module docstring)."""
    r = _warmup(runs)
    if r.empty:
        return Verdict(NO_DATA, "no trained warm-up runs (model: warmup)")
    parts: list[str] = []
    inside = outside = n_trained = 0
    for row in r.itertuples():
        engine, batch, p = problem(str(row.params_json))
        c = np.array(json.loads(str(row.coeffs_json)), dtype=float)
        orders = layer_orders(engine, batch, c)
        # orders[k] is layer k+1's (C_(k+1) maps e_k to e_(k+1)); the lemma covers layers 1..K-1
        trained = [(k, orders[k]) for k in range(p.K - 1) if abs(c[k]) >= TRAINED and math.isfinite(orders[k])]
        n_trained += len(trained)
        inside += sum(p.L + ORDER_TOL < o <= p.L + 1 for _, o in trained)
        outside += sum(o < p.L - ORDER_TOL or o > p.L + 1 + ORDER_TOL for _, o in trained)
        parts.append(
            f"{_label(p)}: C {np.round(c, 3).tolist()}, order by layer {np.round(orders, 3).tolist()}, trained "
            f"layers {[k + 1 for k, _ in trained]}"
        )
    measured = "; ".join(parts)
    if n_trained == 0:
        return Verdict(NO_DATA, "no layer k < K trained (|C_k| >= 0.5) in any run: " + measured)
    verdict: VerdictText = FAILS if outside else HOLDS if inside == n_trained else UNDECIDED
    return Verdict(
        verdict,
        f"{n_trained} trained layers, {outside} of them with an order outside (L, L+1] by more than "
        f"{ORDER_TOL}: " + measured,
        theory="Lemma 2: with C_k around 1, e_(k+1) = (1 - C_k) e_k^L + C_k e_k^(L+1): order in (L, L+1]; while e_k "
        "is near 1 a layer's order is about L + C_k",
        lacks="an order clear of the ends of (L, L+1] by the band" if verdict == UNDECIDED else "",
    )


def _scans(engine: Engine, batch: Batch, k_all: int) -> list[np.ndarray]:
    """Gradients along each coordinate's scan over [0, 1] (others at 0) and along the diagonal C = t 1."""
    grads = []
    for t in SCAN:
        grads.append(gradient(engine, batch, np.full(k_all, t)))
        for k in range(k_all):
            c = np.zeros(k_all)
            c[k] = t
            grads.append(gradient(engine, batch, c))
    return grads


def gradient_sign_scan(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    r = _warmup(runs).drop_duplicates("params_json")
    if r.empty:
        return Verdict(NO_DATA, "no trained warm-up runs (model: warmup)")
    parts, neg, pos, total = [], 0, 0, 0
    for row in r.itertuples():
        engine, batch, p = problem(str(row.params_json))
        g = np.concatenate(_scans(engine, batch, p.K))
        tol = 1e-12 * float(np.abs(g).max())
        neg_here, pos_here = int((g < -tol).sum()), int((g > tol).sum())
        neg, pos, total = neg + neg_here, pos + pos_here, total + g.size
        parts.append(f"{_label(p)}: {pos_here} of {g.size} components > 0, largest {g.max():.3g}")
    verdict: VerdictText = FAILS if pos else HOLDS if neg == total else UNDECIDED
    return Verdict(
        verdict,
        f"dL/dC_k over {len(SCAN)} points of [0, 1] per coordinate (others 0) and on the diagonal: " + "; ".join(parts),
        theory="Lemma 2: D_[C_k] L < 0 for all C_k in [0, 1 + eps]",
        lacks="components at rounding level (neither sign)" if verdict == UNDECIDED else "",
    )


def gradient_flat_at_one(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    r = _warmup(runs).drop_duplicates("params_json")
    if r.empty:
        return Verdict(NO_DATA, "no trained warm-up runs (model: warmup)")
    parts, ratios = [], []
    for row in r.itertuples():
        engine, batch, p = problem(str(row.params_json))
        g0, g1 = gradient(engine, batch, np.zeros(p.K)), gradient(engine, batch, np.ones(p.K))
        rel = [abs(g1[k]) / abs(g0[k]) if g0[k] != 0 else math.inf for k in range(p.K - 1)]
        ratios += rel
        parts.append(f"{_label(p)}: |g_k(1)| / |g_k(0)|, k < K: {[f'{x:.2g}' for x in rel]}")
    worst = max(ratios)
    verdict: VerdictText = HOLDS if worst <= 0.01 else FAILS if worst > 0.1 else UNDECIDED
    return Verdict(
        verdict,
        f"largest ratio {worst:.3g}: " + "; ".join(parts),
        theory="Lemma 2: D_[C_k] L ~ 0 for k in [K-1] when C_k in [1 - eps, 1 + eps] (~0 taken as within 1 % of "
        "the gradient at the start, C = 0; above 10 % does not hold)",
        lacks="a ratio between 1 % and 10 %: the lemma's '~ 0' does not say" if verdict == UNDECIDED else "",
    )


def one_not_a_minimum(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    r = _warmup(runs).drop_duplicates("params_json")
    if r.empty:
        return Verdict(NO_DATA, "no trained warm-up runs (model: warmup)")
    parts, found, minimum = [], 0, 0
    for row in r.itertuples():
        engine, batch, p = problem(str(row.params_json))
        one = np.ones(p.K)
        g = gradient(engine, batch, one)
        norm = float(np.linalg.norm(g))
        with torch.no_grad():
            at = float(loss(engine, batch, torch.tensor(one, dtype=F64)))

            def value(c: np.ndarray, engine: Engine = engine, batch: Batch = batch) -> float:
                return float(loss(engine, batch, torch.tensor(c, dtype=F64)))

            drops = [at - value(one - h * g / norm) for h in STEPS] if norm > 0 else []
            probes = [value(one + s * h * np.eye(p.K)[k]) - at for h in STEPS for k in range(p.K) for s in (1, -1)]
        best = max(drops, default=-math.inf)
        if best > 1e-12 * at:
            found += 1
        elif norm <= 1e-14 * max(at, 1e-300) and min(probes) > 0:
            minimum += 1
        parts.append(f"{_label(p)}: L(1) {at:.4g}, |grad| {norm:.3g}, largest drop along -grad {best:.3g}")
    n = len(parts)
    verdict: VerdictText = HOLDS if found == n else FAILS if minimum else UNDECIDED
    return Verdict(
        verdict,
        f"C = 1 has a descent direction in {found} of {n} problems: " + "; ".join(parts),
        theory="Lemma 2: C_k = 1 for all k is not a global or even local minimum of the training loss",
        lacks="a drop in L above rounding" if verdict == UNDECIDED else "",
    )
