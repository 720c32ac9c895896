"""What the claims of Lemma 2 and Theorem 2 read off a finished run (issue 43), computed where the learner's data
and exact spectral path live, so that analysis/ reads them from the store (it imports no learner code).

- Lemma 2 (warm-up model, a fixed training pool): the order of every layer on the training matrices, and the
  gradient of the training loss Eq. 4 at chosen C: scans of each C_k over [0, 1] (the others at 0) and of the
  diagonal C = t 1; the gradient at C = 0 and C = 1; the loss along -grad from C = 1 and along each coordinate.
- Theorem 2: the standard error of the test loss Eq. 4 over the run's test matrices, the noise a gap is read
  against.

Raw numbers only: the rules that judge them are the claims' (analysis/ldminv/lemma2.py, theory_checks.py).
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import torch

from tasks.ldminv.engine import Batch, Engine, eq4

SCAN = np.linspace(0.0, 1.0, 21)  # points of [0, 1] per scan
STEPS = (1e-1, 1e-2, 1e-3, 1e-4)  # step lengths tried from C = 1
F64 = torch.float64


def _loss(engine: Engine, batch: Batch, coeffs: np.ndarray) -> float:
    with torch.no_grad():
        return float(eq4(engine.losses(batch, torch.tensor(coeffs, dtype=F64))))


def gradient(engine: Engine, batch: Batch, coeffs: np.ndarray) -> np.ndarray:
    """dL/dC of Eq. 4 on `batch` at `coeffs`."""
    c = torch.tensor(coeffs, dtype=F64, requires_grad=True)
    eq4(engine.losses(batch, c)).backward()
    assert c.grad is not None
    return c.grad.numpy().copy()


def layer_orders(engine: Engine, batch: Batch, coeffs: np.ndarray) -> list[float]:
    """log e_k / log e_(k-1) for layers k = 1..K (layer k applies C_k), e_k = max_j |e_kj| over the batch."""
    with torch.no_grad():
        es = [batch.start, *engine.spectral_layers(batch, torch.tensor(coeffs, dtype=F64))]
    worst = [float(e.abs().max()) for e in es]
    return [math.log(b) / math.log(a) if 0 < a < 1 and b > 0 else math.nan for a, b in itertools.pairwise(worst)]


def lemma2(engine: Engine, pool: Batch, learned: np.ndarray) -> dict[str, float | str]:
    """Lemma 2's facts on the training pool (summary fields `lemma2_*`)."""
    k_all = len(learned)
    scans = []
    for t in SCAN:
        scans.append(gradient(engine, pool, np.full(k_all, t)))
        for k in range(k_all):
            c = np.zeros(k_all)
            c[k] = t
            scans.append(gradient(engine, pool, c))
    g = np.concatenate(scans)
    one = np.ones(k_all)
    g0, g1 = gradient(engine, pool, np.zeros(k_all)), gradient(engine, pool, one)
    at_one = _loss(engine, pool, one)
    norm = float(np.linalg.norm(g1))
    drops = [at_one - _loss(engine, pool, one - h * g1 / norm) for h in STEPS] if norm > 0 else [-math.inf]
    probes = [
        _loss(engine, pool, one + s * h * np.eye(k_all)[k]) - at_one
        for h in STEPS
        for k in range(k_all)
        for s in (1, -1)
    ]
    return {
        "lemma2_orders_json": json.dumps([round(o, 6) for o in layer_orders(engine, pool, learned)]),
        "lemma2_scan_n": int(g.size),
        "lemma2_scan_max": float(g.max()),  # the component nearest to (or above) 0
        "lemma2_scan_absmax": float(np.abs(g).max()),
        "lemma2_grad0_json": json.dumps([float(x) for x in g0]),
        "lemma2_grad1_json": json.dumps([float(x) for x in g1]),
        "lemma2_loss_at_one": at_one,
        "lemma2_drop_at_one": float(max(drops)),  # the largest fall of L along -grad from C = 1
        "lemma2_probe_min_at_one": float(min(probes)),  # the smallest change along +-each coordinate
    }


def eq4_standard_error(layers: list[torch.Tensor]) -> float:
    """The standard error of the mean Eq. 4 over a set of matrices, from its per-layer, per-matrix losses (the
    per-matrix Eq. 4's sd / sqrt n)."""
    per = (torch.stack(layers).sum(dim=0) / (2 * len(layers))).to(F64)
    return float(per.std() / math.sqrt(per.numel())) if per.numel() > 1 else math.inf
