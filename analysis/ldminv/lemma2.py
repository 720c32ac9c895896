"""Lemma 2 (paper 000, App. C.1.1) on the very problem each theory_lemma2 run trained on (issue 43).

The learner stores, per warm-up run, the order of every layer on its training matrix and the gradient of the
training loss Eq. 4 where the lemma speaks of it (tasks/ldminv/lemma2_facts.py: the `lemma2_*` summary fields);
the rules that judge them are here, fixed from the lemma's text before these numbers were read:

- order: the lemma's "C_k around 1 ... order L~ in (L, L+1]" is decided on the layers that trained (|C_k| >= 1/2,
  half way from their start at 0 to 1), for k < K; a layer whose C_k stayed near 0 is fixed D-Minv (order L by
  Lemma 1) and says nothing about learning. Orders within ORDER_TOL of the interval's ends are undecided.
- sign: D_[C_k] L < 0 for all C_k in [0, 1 + eps]: every component negative along each coordinate's scan over
  [0, 1] (the others at their start, 0) and along the diagonal C = t 1. A component within 1e-12 of the largest
  one's size shows no sign (undecided); one above that, positive, does not hold.
- flat at 1: D_[C_k] L ~ 0 for k in [K-1] when C_k ~ 1: at C = 1 within 1 % of the gradient at C = 0 holds,
  above 10 % does not, between is undecided.
- not a minimum: L(1 - h g/|g|) < L(1) for one step h holds; a gradient that vanishes to rounding with every
  coordinate probe going up does not; else undecided.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from analysis.claims import FAILS, HOLDS, NO_DATA, UNDECIDED, Check, Verdict, VerdictText

ORDER_TOL = 0.05  # undecided band around the ends of (L, L+1]
TRAINED = 0.5  # |C_k| at least this far from its start (0) towards 1: the layer trained
SIGN_TOL = 1e-12  # relative to the scan's largest component: below it a component shows no sign
FIELDS = ["lemma2_orders_json", "lemma2_scan_max", "lemma2_grad0_json", "lemma2_loss_at_one"]


def _warmup(runs: pd.DataFrame) -> pd.DataFrame:
    r = runs[(runs["algo"] == "minv") & (runs["model"] == "warmup") & (runs["iters"].astype(float) > 0)]
    r = r[r["status"] == "ok"] if "status" in r else r
    if not set(FIELDS) <= set(r.columns):
        return r.iloc[0:0]
    return r.dropna(subset=FIELDS)


def _label(row: pd.Series) -> str:
    return f"{int(row['rows'])}x{int(row['cols'])} L={int(row['L'])} seed {int(row['seed'])}"


def _verdict(verdict: VerdictText, measured: str, theory: str, lacks: str) -> Verdict:
    """A Lemma 2 verdict; `lacks` says what an undecided one needs (and is dropped once decided)."""
    return Verdict(verdict, measured, theory=theory, lacks=lacks if verdict == UNDECIDED else "")


def _no_facts() -> Verdict:
    return Verdict(NO_DATA, "no warm-up runs with Lemma 2's stored facts (lemma2_* fields: runs of 2026-11-29 on)")


def _on_facts(judge: Callable[[pd.DataFrame], Verdict]) -> Check:
    """A check that judges the stored facts of each distinct warm-up problem (not enough data without any)."""

    def check(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
        r = _warmup(runs).drop_duplicates("params_json")
        return _no_facts() if r.empty else judge(r)

    check.__doc__ = judge.__doc__
    return check


def order_on_trained_layers(runs: pd.DataFrame, _: pd.DataFrame | None) -> Verdict:
    """Lemma 2's order, decided on the layers whose C_k trained (module docstring)."""
    r = _warmup(runs)
    if r.empty:
        return _no_facts()
    parts: list[str] = []
    inside = outside = n_trained = 0
    for _, row in r.iterrows():
        c = np.array(json.loads(str(row["coeffs_json"])), dtype=float)
        orders = json.loads(str(row["lemma2_orders_json"]))
        depth = int(row["L"])
        # orders[k] is layer k+1's (C_(k+1) maps e_k to e_(k+1)); the lemma covers layers 1..K-1
        trained = [
            (k, float(orders[k]))
            for k in range(len(c) - 1)
            if abs(c[k]) >= TRAINED and orders[k] is not None and math.isfinite(orders[k])
        ]
        n_trained += len(trained)
        inside += sum(depth + ORDER_TOL < o <= depth + 1 for _, o in trained)
        outside += sum(o < depth - ORDER_TOL or o > depth + 1 + ORDER_TOL for _, o in trained)
        parts.append(
            f"{_label(row)}: C {np.round(c, 3).tolist()}, order by layer {np.round(orders, 3).tolist()}, trained "
            f"layers {[k + 1 for k, _ in trained]}"
        )
    measured = "; ".join(parts)
    if n_trained == 0:
        return Verdict(NO_DATA, "no layer k < K trained (|C_k| >= 0.5) in any run: " + measured)
    verdict: VerdictText = FAILS if outside else HOLDS if inside == n_trained else UNDECIDED
    return _verdict(
        verdict,
        f"{n_trained} trained layers, {outside} of them with an order outside (L, L+1] by more than "
        f"{ORDER_TOL}: " + measured,
        "Lemma 2: with C_k around 1, e_(k+1) = (1 - C_k) e_k^L + C_k e_k^(L+1): order in (L, L+1]; while e_k "
        "is near 1 a layer's order is about L + C_k",
        "an order clear of the ends of (L, L+1] by the band",
    )


@_on_facts
def gradient_sign_scan(r: pd.DataFrame) -> Verdict:
    top, size = r["lemma2_scan_max"].astype(float), r["lemma2_scan_absmax"].astype(float)
    positive = top > SIGN_TOL * size
    negative = top < -SIGN_TOL * size
    parts = [
        f"{_label(row)}: largest component {row['lemma2_scan_max']:.3g} of {int(row['lemma2_scan_n'])} "
        f"(largest size {row['lemma2_scan_absmax']:.3g})"
        for _, row in r.iterrows()
    ]
    verdict: VerdictText = FAILS if positive.any() else HOLDS if negative.all() else UNDECIDED
    return _verdict(
        verdict,
        f"dL/dC_k over 21 points of [0, 1] per coordinate (others 0) and on the diagonal; positive in "
        f"{int(positive.sum())} of {len(r)} problems, every component negative beyond {SIGN_TOL:g} of the largest in "
        f"{int(negative.sum())}: " + "; ".join(parts),
        "Lemma 2: D_[C_k] L < 0 for all C_k in [0, 1 + eps]",
        "components at rounding level (no sign shown)",
    )


@_on_facts
def gradient_flat_at_one(r: pd.DataFrame) -> Verdict:
    parts, ratios = [], []
    for _, row in r.iterrows():
        g0 = np.array(json.loads(str(row["lemma2_grad0_json"])), dtype=float)
        g1 = np.array(json.loads(str(row["lemma2_grad1_json"])), dtype=float)
        rel = [abs(g1[k]) / abs(g0[k]) if g0[k] != 0 else math.inf for k in range(len(g0) - 1)]
        ratios += rel
        parts.append(f"{_label(row)}: |g_k(1)| / |g_k(0)|, k < K: {[f'{x:.2g}' for x in rel]}")
    worst = max(ratios)
    verdict: VerdictText = HOLDS if worst <= 0.01 else FAILS if worst > 0.1 else UNDECIDED
    return _verdict(
        verdict,
        f"largest ratio {worst:.3g}: " + "; ".join(parts),
        "Lemma 2: D_[C_k] L ~ 0 for k in [K-1] when C_k in [1 - eps, 1 + eps] (~0 taken as within 1 % of "
        "the gradient at the start, C = 0; above 10 % does not hold)",
        "a ratio between 1 % and 10 %: the lemma's '~ 0' does not say",
    )


@_on_facts
def one_not_a_minimum(r: pd.DataFrame) -> Verdict:
    parts, found, minimum = [], 0, 0
    for _, row in r.iterrows():
        at, drop = float(row["lemma2_loss_at_one"]), float(row["lemma2_drop_at_one"])
        g1 = np.array(json.loads(str(row["lemma2_grad1_json"])), dtype=float)
        norm = float(np.linalg.norm(g1))
        if drop > 1e-12 * at:
            found += 1
        elif norm <= 1e-14 * max(at, 1e-300) and float(row["lemma2_probe_min_at_one"]) > 0:
            minimum += 1
        parts.append(f"{_label(row)}: L(1) {at:.4g}, |grad| {norm:.3g}, largest drop along -grad {drop:.3g}")
    n = len(parts)
    verdict: VerdictText = HOLDS if found == n else FAILS if minimum else UNDECIDED
    return _verdict(
        verdict,
        f"C = 1 has a descent direction in {found} of {n} problems: " + "; ".join(parts),
        "Lemma 2: C_k = 1 for all k is not a global or even local minimum of the training loss",
        "a drop in L above rounding",
    )
