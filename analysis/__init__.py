"""Analysis of a convgrid store with pandas: loading, aggregation over seeds, figures, reports.

import analysis
runs = analysis.load("results", task="deep_linear", grid="fig2_depth")
curves = analysis.curves("results", task="deep_linear", runs=runs)
"""

from analysis.aggregate import curve_band, over_seeds
from analysis.load import curves, finished, finished_runs, load, members, task_names

__all__ = ["curve_band", "curves", "finished", "finished_runs", "load", "members", "over_seeds", "task_names"]
