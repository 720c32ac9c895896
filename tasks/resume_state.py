"""Pieces of a learner's checkpoint that several learners share (tasks.base.Checkpoint).

An optimiser's per-parameter state (Adam's moments and step count, SGD's momentum buffer) goes into a
checkpoint's `tensors` under one name per entry, and comes back into a fresh optimiser over the same
parameters, so the next `step()` computes what the uninterrupted run's would. Only the per-parameter state
is kept: a learner builds its optimiser from its params (learning rates, betas) and restores its own
schedule, so the hyper-parameters never travel (they are plain config, not state).

A batch whose members resume from different steps (`RunContext.resume`) runs as one batch per step:
`by_resume_step`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from tasks.base import Result, RunContext

P = TypeVar("P")


def optimizer_tensors(
    opt: torch.optim.Optimizer, params: Sequence[torch.Tensor], prefix: str
) -> dict[str, torch.Tensor]:
    """`opt`'s state of each of `params` (in order) as `{prefix}{i}.{key}` -> a copy of the tensor on the CPU
    (a checkpoint resumes on any node). A parameter that has not been stepped yet has no state and no entry."""
    out: dict[str, torch.Tensor] = {}
    for i, param in enumerate(params):
        for key, value in opt.state.get(param, {}).items():
            if not isinstance(value, torch.Tensor):
                raise TypeError(f"optimizer state {key!r} is {type(value).__name__}, not a tensor")
            out[f"{prefix}{i}.{key}"] = value.detach().to("cpu", copy=True)
    return out


def load_optimizer(
    opt: torch.optim.Optimizer, params: Sequence[torch.Tensor], tensors: dict[str, torch.Tensor], prefix: str
) -> None:
    """Give `opt` back the state `optimizer_tensors` saved for `params`: copies on each parameter's device,
    but for Adam's `step`, which stays on the CPU (as torch's own `load_state_dict` keeps it for an optimiser
    that is neither capturable nor fused, the only kind the learners build)."""
    for i, param in enumerate(params):
        head = f"{prefix}{i}."
        state = {
            k[len(head) :]: v.clone() if k.endswith(".step") else v.to(param.device, copy=True)
            for k, v in tensors.items()
            if k.startswith(head)
        }
        if state:
            opt.state[param] = state


def generator_states(gens: dict[str, torch.Generator]) -> dict[str, torch.Tensor]:
    """Each generator's state under `gen.{name}`."""
    return {f"gen.{name}": g.get_state() for name, g in gens.items()}


def load_generators(gens: dict[str, torch.Generator], tensors: dict[str, torch.Tensor]) -> None:
    for name, g in gens.items():
        g.set_state(tensors[f"gen.{name}"].clone())


def by_resume_step(
    ps: Sequence[P], ctxs: Sequence[RunContext], run_batch: Callable[[Sequence[P], Sequence[RunContext]], list[Result]]
) -> list[Result] | None:
    """A batch whose members resume from different steps (tasks.base.RunContext.resume; None: step 0) as
    one `run_batch` call per step, the results in the members' order; None where all start at one step
    (the caller runs them as one batch: a batched loop keeps one step counter). A member's trajectory does
    not depend on who shares its batch."""
    starts = [ctx.resume.step if ctx.resume is not None else 0 for ctx in ctxs]
    if len(set(starts)) <= 1:
        return None
    results: dict[int, Result] = {}
    for start in sorted(set(starts)):
        idx = [i for i, s in enumerate(starts) if s == start]
        results.update(zip(idx, run_batch([ps[i] for i in idx], [ctxs[i] for i in idx]), strict=True))
    return [results[i] for i in range(len(ps))]
