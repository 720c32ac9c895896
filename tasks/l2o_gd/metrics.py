"""Improvement ratios (sec. 6.5): "(obj of GD - obj of Math-L2O)/(obj of GD) and its mean value on T GD
iterations", on the summed objective F (spec's recommendation) and per instance.

    r_t      = (F_GD(X_t) - F(X_t)) / F_GD(X_t),  t = 1..T
    imp_last = r_T,   imp_mean = (1/T) sum_{t=1..T} r_t     (t = 0 is excluded: it contributes 0)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def ratios(f_ref: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    """r_t for t = 1..T from objective trajectories indexed t = 0..T (any trailing dims, e.g. instances)."""
    return (f_ref[1:] - f[1:]) / f_ref[1:]


@dataclass(frozen=True)
class Improvement:
    last: float  # r_T on the summed F
    mean: float  # mean over t = 1..T of r_t on the summed F
    last_inst: list[float]  # r_T per instance
    mean_inst: list[float]  # mean over t of r_t per instance


def improvement(f_ref_inst: torch.Tensor, f_inst: torch.Tensor) -> Improvement:
    """From per-instance trajectories (T+1, N) of the reference (GD with 1/beta) and the learner."""
    r = ratios(f_ref_inst.sum(-1), f_inst.sum(-1))
    r_inst = ratios(f_ref_inst, f_inst)
    return Improvement(
        last=float(r[-1]),
        mean=float(r.mean()),
        last_inst=r_inst[-1].tolist(),
        mean_inst=r_inst.mean(0).tolist(),
    )
