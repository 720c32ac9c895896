"""Gauss-Seidel bookkeeping shared by BCGD and BCSGD (spec section 1.10 and G15).

For the layer i updated next, a learner needs A = W_{L:(i+1)} and P = W_{(i-1):1} at the *current*
weights. Descending sweeps (W_L..W_1) cache the prefixes P from the weights at the start of the
sweep (the layers below i are not yet updated) and carry A down, including the layers already
updated in this sweep. Ascending sweeps cache the suffixes A from the start of the sweep and carry
the prefix B = W_{i:1} up. Mixing these up silently breaks Gauss-Seidel semantics (spec G15).
`None` stands for an identity factor (A at the top layer, P at the bottom one): no product is made
or counted for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from tasks.deep_linear.flops import FlopCounter


@dataclass
class Slot:
    i: int  # layer being updated, 1..L
    a: torch.Tensor | None  # W_{L:(i+1)} (d_out x n_i); None = identity
    p: torch.Tensor | None  # W_{(i-1):1} (n_{i-1} x d_in); None = identity
    aw: torch.Tensor  # A W_i (d_out x n_{i-1})
    m: torch.Tensor  # end-to-end W_{L:1} before the update (d_out x d_in)
    a_after: torch.Tensor | None = None  # descending: the learner may hand back A W_i(new) for free


def gauss_seidel_slots(ws: list[torch.Tensor], order: str, counter: FlopCounter) -> Iterator[Slot]:
    """Yield one Slot per layer update, sweep after sweep, forever.

    The caller replaces ws[i-1] with the updated W_i before asking for the next slot.
    """
    depth = len(ws)
    while True:
        if order == "desc":
            pref: list[torch.Tensor | None] = [None] * depth  # pref[j] = W_j..W_1 (old weights)
            if depth >= 2:
                pref[1] = ws[0]
            for j in range(2, depth):
                pref[j] = counter.mm(ws[j - 1], pref[j - 1])  # type: ignore[arg-type]  # the products are filled before use
            a: torch.Tensor | None = None
            for i in range(depth, 0, -1):
                w, pm = ws[i - 1], pref[i - 1]
                aw = w if a is None else counter.mm(a, w)
                m = aw if pm is None else counter.mm(aw, pm)
                slot = Slot(i, a, pm, aw, m)
                yield slot
                pref[i - 1] = None  # free memory as the sweep goes down
                if i > 1:
                    if slot.a_after is not None:
                        a = slot.a_after
                    else:
                        a = ws[i - 1] if a is None else counter.mm(a, ws[i - 1])
        elif order == "asc":
            suf: list[torch.Tensor | None] = [None] * (depth + 1)  # suf[j] = W_L..W_{j+1} (old weights)
            if depth >= 2:
                suf[depth - 1] = ws[depth - 1]
            for j in range(depth - 2, 0, -1):
                suf[j] = counter.mm(suf[j + 1], ws[j])  # type: ignore[arg-type]  # the products are filled before use
            b: torch.Tensor | None = None
            for i in range(1, depth + 1):
                w, a = ws[i - 1], suf[i]
                aw = w if a is None else counter.mm(a, w)
                m = aw if b is None else counter.mm(aw, b)
                yield Slot(i, a, b, aw, m)
                if i < depth:
                    b = ws[i - 1] if b is None else counter.mm(ws[i - 1], b)
        else:
            raise ValueError(f"unknown order {order!r}; valid: desc, asc")
