"""What the ingest benchmarks (benchmarks/ingest.py, benchmarks/ingest_sim.py) share: the environment
they set before anything imports runner or ray, and the grid of this learner's runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def prepare() -> None:
    """Ray on loopback without usage statistics; the merge after a run off (maintenance, measured apart);
    this learner registered as `synth`, and the repository on every worker's path."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["CONVGRID_COMPACT_PARTS"] = "0"
    learners = os.environ.get("CONVGRID_LEARNERS", "")
    os.environ["CONVGRID_LEARNERS"] = ",".join(filter(None, [learners, "synth=benchmarks.ingest_learner"]))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(REPO))


def synth_grid(name: str, runs: int, steps: int, sleep_s: float = 0.0) -> dict[str, object]:
    """`runs` runs of `steps` curve rows each (seeds 0..runs-1), each waiting `sleep_s` first."""
    params: dict[str, object] = {"steps": steps, **({"sleep_s": round(sleep_s, 4)} if sleep_s else {})}
    return {"name": name, "blocks": [{"task": "synth", "params": params, "product": {"seed": list(range(runs))}}]}
