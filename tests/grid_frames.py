"""A shipped grid run in-process, straight through its task, as the frames figure modules take:
runs (one row per run: run_id, status, params, summary, flops, n_steps, wall_s) and curves."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd

from runner.grid.schema import stored_curve
from runner.grid.spec import load_grid
from tasks import RunContext, get_task


def grid_frames(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows: list[dict[str, Any]] = []
    curves = []
    for i, cell in enumerate(load_grid(path).cells):
        task = get_task(cell.task)
        t0 = time.perf_counter()
        res = task.run(cell.params, RunContext())
        res.validate(task)
        run_id = f"{path.stem}-{i}"
        rows.append(
            {
                "run_id": run_id,
                "status": res.status,
                **cell.params.model_dump(mode="json"),
                **res.summary,
                "flops": res.flops,
                "n_steps": res.n_steps,
                "wall_s": time.perf_counter() - t0,
            }
        )
        curve = pd.DataFrame(stored_curve(cell.task, res.curve))  # under the store's column names
        curve.insert(0, "run_id", run_id)
        curves.append(curve)
    return pd.DataFrame(rows), pd.concat(curves, ignore_index=True)
