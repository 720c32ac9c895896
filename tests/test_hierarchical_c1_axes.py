"""hierarchical's C1 figure read back (issue 45): γ typeset, not "gamma=0.1"; the stage axis labelled;
one legend for panels that draw the same lines; a suptitle a reader can decode."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.figures import drawn, figure_for


def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    runs, curves = [], []
    for gamma in (0.1, 0.3):
        for protocol in ("joint", "layerwise"):
            for seed in (0, 1):
                rid = f"{gamma}-{protocol}-{seed}"
                runs.append(
                    {
                        "run_id": rid,
                        "status": "ok",
                        "L": 3,
                        "dist": "gaussian",
                        "gamma": gamma,
                        "protocol": protocol,
                        "seed": seed,
                        "mse_after_l2": 0.5 + gamma,
                        "mse_after_l3": 0.2 + gamma,
                        "test_mse": 0.1 + gamma,
                    }
                )
                curves += [{"run_id": rid, "step": t, "fe_orth_l2_t": 0.9 / (t + 1) + gamma} for t in range(5)]
    return pd.DataFrame(runs), pd.DataFrame(curves)


def test_c1_reads_as_a_researcher_expects(tmp_path: Path) -> None:
    found = figure_for("hierarchical", "c1_joint_vs_layerwise")
    assert found is not None
    with drawn() as figures:
        found[1](*_frames(), tmp_path)
    (fig,) = figures
    top, bottom = fig.axes[0], fig.axes[1]
    labels = [str(ln.get_label()) for ln in top.get_lines()]
    assert "γ = 0.1, joint" in labels and not any("gamma" in label for label in labels)
    assert top.get_xlabel() == "training stage (layers trained so far)"
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 1  # the panels draw the same lines
    assert "Joint (solid) against layer-wise (dashed)" in fig.get_suptitle() and "8.5-74x" not in fig.get_suptitle()
    assert bottom.get_xlabel() == "epoch"
