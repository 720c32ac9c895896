"""Protocols as lists of phases (spec 2.5, 2.7, 2.9 and 3.10).

Staged protocols run, for l = 2..L, stage l^Delta (W_l joins; layers above l are not in the output)
then, if k_start is distill, INITIAL-DISTILL of K_l and stage l^Nabla (K_l joins, its distillation
regularisers switch on), and a final phase at final_lr. Which lower layers train is the protocol:
  joint      every layer <= l (Algorithm 1: lower layers are never frozen)
  layerwise  only layer l (footnote 6: earlier layers frozen)
  window w   layers l-w..l (synthetic analogue of Fig. 9's "fix <= l-2w, train the rest")
all_from_start has one phase of the same total epochs with every layer in from step 0, then the final phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tasks.hierarchical.params import WKParams


@dataclass(frozen=True)
class Phase:
    name: str  # "2D", "2N", ..., "final", "all"
    top: int  # layers 2..top are in the output
    epochs: int
    lr: float
    train_w: frozenset[int]
    train_k: frozenset[int]
    distill_before: int | None = None  # layer whose K is set by INITIAL-DISTILL when the phase starts
    ends_layer: int | None = None  # layer l whose l^Nabla stage this phase ends (summary 'after_l')
    reg_layers: frozenset[int] = field(default_factory=frozenset)  # layers whose lam3..5 terms are on


def lowest_trainable(p: WKParams, layer: int) -> int:
    if p.protocol == "layerwise":
        return layer
    if p.protocol == "window":
        assert p.window is not None
        return max(2, layer - p.window)
    return 2


def phases(p: WKParams) -> list[Phase]:
    depth, e = p.L, p.epochs_per_stage
    every = frozenset(range(2, depth + 1))
    if p.protocol == "all_from_start":
        out = [Phase("all", depth, e * 2 * (depth - 1), p.lr, every, every, None, None, every)]
        if p.final_epochs:
            out.append(Phase("final", depth, p.final_epochs, p.final_lr, every, every, None, None, every))
        return out
    distill = p.k_start == "distill"
    out = []
    reg: frozenset[int] = frozenset() if distill else every
    for layer in range(2, depth + 1):
        lo = lowest_trainable(p, layer)
        band = frozenset(range(lo, layer + 1))
        below = frozenset(range(lo, layer))
        if distill:
            out.append(Phase(f"{layer}D", layer, e, p.lr, band, below, None, None, reg))
            reg = reg | {layer}
            out.append(Phase(f"{layer}N", layer, e, p.lr, band, band, layer, layer, reg))
        else:
            # K random from step 0: one stage per layer of the same length as l^Delta + l^Nabla
            out.append(Phase(f"{layer}N", layer, 2 * e, p.lr, band, band, None, layer, reg))
    lo = lowest_trainable(p, depth)
    band = frozenset(range(lo, depth + 1))
    if p.final_epochs:
        out.append(Phase("final", depth, p.final_epochs, p.final_lr, band, band, None, None, reg))
    return out


def position(epochs: list[int], done: int) -> tuple[int, int]:
    """The phase (index into `epochs`, each phase's number of epochs) and the epoch within it of the run's
    `done`-th epoch (1-based): where a run resumed after that epoch picks up."""
    offset = 0
    for i, n in enumerate(epochs):
        if done <= offset + n:
            return i, done - offset - 1
        offset += n
    raise ValueError(f"epoch {done} is past the run's {offset} epochs")
