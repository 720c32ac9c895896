"""Grids and studies of the `faulty` toy learner (tests/toy_learner/) that several tests run: a grid with
runs that finish and one that fails, and the study the tuning fault tests run (x^2 minimised over [-2, 2],
each trial sleeping `sleep_s` so that a kill lands while trials are in flight)."""

from __future__ import annotations

from typing import Any


def faulty_study(
    name: str, n_trials: int, parallel: int, sleep_s: float | None = None, sampler: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The study file's content (keys in the order a hand-written study file has them)."""
    study: dict[str, Any] = {"name": name, "task": "faulty"}
    if sleep_s is not None:
        study["params"] = {"sleep_s": sleep_s}
    study["space"] = {"x": {"type": "float", "low": -2.0, "high": 2.0}}
    study["objective"] = {"metric": "square"}
    if sampler is not None:
        study["sampler"] = sampler
    return {**study, "n_trials": n_trials, "parallel": parallel}


def grid_with_a_failure(ok: list[float], failing: float) -> dict[str, Any]:
    """Grid "f": a run at each x of `ok`, and one at x = `failing` that fails (RuntimeError, recorded)."""
    return {
        "name": "f",
        "blocks": [
            {"task": "faulty", "product": {"x": ok}},
            {"task": "faulty", "params": {"x": failing, "fail": True}},
        ],
    }
