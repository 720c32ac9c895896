"""A learner whose runs cost nothing but their curve: `steps` rows of (step, loss, grad_norm), built the
way real learners hand them back (Python lists of floats), from a seeded generator."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from tasks.base import FieldType, Result, RunContext, TaskParams


class SynthParams(TaskParams):
    steps: int = Field(10, ge=1, description="curve rows the run returns")
    sleep_s: float = Field(0.0, ge=0.0, description="seconds the run waits first (paced rounds)")


class SynthTask:
    name: ClassVar[str] = "synth"
    version: ClassVar[str] = "1"
    Params: ClassVar[Any] = SynthParams
    summary_fields: ClassVar[dict[str, FieldType]] = {"final_loss": "float"}
    curve_fields: ClassVar[dict[str, FieldType]] = {"loss": "float", "grad_norm": "float"}
    examples: ClassVar[list[dict[str, Any]]] = [{"steps": 10}]
    diverging_example: ClassVar[dict[str, Any] | None] = None

    def run(self, p: SynthParams, ctx: RunContext) -> Result:
        time.sleep(p.sleep_s)
        rng = np.random.default_rng(p.seed)
        loss = np.exp(-np.arange(p.steps) / max(p.steps, 1)) + 0.01 * rng.random(p.steps)
        grad = np.abs(np.diff(loss, prepend=loss[0])) + 1e-3
        curve = {"step": list(range(p.steps)), "loss": loss.tolist(), "grad_norm": grad.tolist()}
        return Result(status="ok", summary={"final_loss": float(loss[-1])}, curve=curve, n_steps=p.steps)


TASK = SynthTask
