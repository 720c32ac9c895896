"""A study's figures, drawn by Optuna's own plots (`optuna.visualization.matplotlib`): the optimisation
history, a slice per searched param, the params' importances (Optuna's default evaluator) where two or
more are searched, and, where a pruner ran, the intermediate values of every trial (its y axis named for
the metric the runs reported); a multi-objective study gets its Pareto front.

The plots read the study from its Optuna storage, the source of truth for trials (distributions,
intermediate values, states). The store's `trials/` table names that storage for each study:
`journal:optuna.journal` is the journal file in the results root, `journal:/abs/path` one elsewhere;
an RDB URL is stored without its password, so it cannot be opened from the report: the study's
section then says so, and its trials are summarised from `trials/` alone (`trial_summary`).

The only analysis module that imports Optuna, and only inside its functions: `import analysis`, and
`convgrid check`, load neither Optuna nor pyplot.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.figures import save_figure
from analysis.load import open_store
from analysis.style import COLORS, context, new_figure
from runner.store.trials import read_trials

JOURNAL = "journal:"
PLOT_SIZE = (5.6, 3.8)  # two side by side on the report's page
MAX_LEGEND = 12  # entries; Optuna's intermediate-values plot has one per trial
OURS = ("history", "slice", "intermediate")  # drawn here in the house style, sized as drawn


@dataclass
class StudyFigures:
    """What a study's section shows: its plots, or why there are none, and its trials' states."""

    study: str
    storage: str
    images: list[Path] = field(default_factory=list)
    note: str = ""
    states: dict[str, int] = field(default_factory=dict)
    best: pd.DataFrame | None = None  # the best trials (number, value, params, run id), from trials/


def trials_frame(root: str | os.PathLike[str]) -> pd.DataFrame:
    """The store's `trials/` table, one row per trial (newest row per trial), as pandas."""
    return read_trials(open_store(root)).to_pandas()


def journal_path(root: str | os.PathLike[str], storage: str) -> Path | None:
    """The journal file a `trials/` storage label names, or None (an RDB, or a root that is not a
    local folder: a journal in an object store is not a file Optuna can read)."""
    if not storage.startswith(JOURNAL):
        return None
    path = Path(storage[len(JOURNAL) :])
    if path.is_absolute():
        return path
    return Path(root) / path if "://" not in str(root) else None


def load_study(root: str | os.PathLike[str], name: str, storage: str) -> Any:
    """The Optuna study `name` as its journal holds it; ValueError saying why when it cannot be read."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = journal_path(root, storage)
    if path is None:
        raise ValueError(
            f"its storage {storage} is not a journal file in a local results root (an RDB's password is not "
            "stored); open it with optuna-dashboard or optuna.load_study"
        )
    if not path.is_file():
        raise ValueError(f"its journal {path} is not there")
    return optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(str(path))))


def trial_summary(
    trials: pd.DataFrame, name: str, maximize: bool = False, top: int = 5
) -> tuple[dict[str, int], pd.DataFrame]:
    """(trials per state, the `top` best complete trials by the value Optuna was told) of study `name`,
    from the `trials/` table."""
    mine = trials[trials["study"] == name]
    states = {str(k): int(v) for k, v in mine["state"].value_counts().sort_index().items()}
    done = mine[(mine["state"] == "COMPLETE") & mine["value"].notna()]
    best = done.sort_values("value", ascending=not maximize).head(top)
    return states, best[["number", "value", "params_json", "run_id"]].reset_index(drop=True)


def _plots(
    study: Any,
    outcomes: dict[int, str] | None = None,
    references: Sequence[tuple[str, float]] = (),
    param_references: Sequence[tuple[str, str, float]] = (),
) -> list[tuple[str, Any]]:
    """(file stem, function drawing one plot) for every plot that fits the study: the history and slices
    ours in the house style (analysis.study_plots), the Pareto front and importances Optuna's."""
    from optuna.trial import TrialState
    from optuna.visualization import matplotlib as vis

    from analysis import study_plots

    finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    names = getattr(study, "metric_names", None)
    plots: list[tuple[str, Any]] = []
    target: dict[str, Any]
    first: Any = None
    if len(study.directions) > 1:
        if len(study.directions) <= 3:
            plots.append(("pareto_front", lambda: vis.plot_pareto_front(study, target_names=names)))
        target_name = names[0] if names else "objective 0"
        first = lambda t: t.values[0]  # noqa: E731
        target = {"target": first, "target_name": target_name}
    else:
        target_name = names[0] if names else "objective value"
        target = {"target_name": target_name}
        plots.append(
            ("history", lambda: study_plots.history(study, outcomes or {}, target_name, references, OUTCOME_STYLE))
        )
    if finished and any(t.params for t in finished):
        plots.append(("slice", lambda: study_plots.slices(study, first, target_name, param_references)))
    # one searched param has importance 1 by definition: a panel with one full bar says nothing
    if len(finished) >= 2 and len({p for t in finished for p in t.params}) >= 2:
        plots.append(("importances", lambda: vis.plot_param_importances(study, **target)))
    if any(t.intermediate_values for t in study.get_trials(deepcopy=False)):
        reported = (study.user_attrs.get("convgrid") or {}).get("reported")  # studies before it: Optuna's label
        plots.append(("intermediate", lambda: intermediate_by_outcome(study, outcomes or {}, reported)))
    return plots


OUTCOME_STYLE: dict[str, dict[str, Any]] = {  # how each trial ended: colour, and the mark at its last reported step
    "complete": {"color": COLORS[0], "marker": "o"},
    "pruned": {"color": COLORS[4], "marker": "|"},
    "diverged": {"color": COLORS[1], "marker": "x"},
    "failed": {"color": COLORS[6], "marker": "s"},
}


def outcome(state: str, run_status: str | None) -> str:
    """A trial's outcome as a reader asks it: its run diverged, else Optuna's state (RUNNING/WAITING: failed
    to finish)."""
    if run_status == "diverged":
        return "diverged"
    return {"COMPLETE": "complete", "PRUNED": "pruned"}.get(state, "failed")


def intermediate_by_outcome(study: Any, outcomes: dict[int, str], reported: str | None) -> Any:
    """Every trial's intermediate values, coloured by how it ended (`outcomes`: trial number -> outcome,
    else from Optuna's state), its last value marked, one legend entry per outcome with its count."""
    import matplotlib.style
    from matplotlib.lines import Line2D

    # Optuna's plots drawn before this one switch matplotlib to its grey ggplot style: this one is ours
    with matplotlib.style.context("default"), context():
        return _intermediate(study, outcomes, reported, Line2D)


def _intermediate(study: Any, outcomes: dict[int, str], reported: str | None, Line2D: Any) -> Any:  # noqa: N803
    fig, ax = new_figure(figsize=PLOT_SIZE)
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        if not t.intermediate_values:
            continue
        kind = outcomes.get(t.number) or outcome(t.state.name, None)
        counts[kind] = counts.get(kind, 0) + 1
        steps = sorted(t.intermediate_values)
        values = [t.intermediate_values[k] for k in steps]
        look = OUTCOME_STYLE[kind]
        ax.plot(steps, values, color=look["color"], linewidth=1.0, alpha=0.8)
        ax.plot(steps[-1:], values[-1:], linestyle="none", markersize=6, mew=1.5, **look)
    handles = [
        Line2D([], [], linewidth=1.0, label=f"{kind} ({counts[kind]})", **OUTCOME_STYLE[kind])
        for kind in OUTCOME_STYLE
        if kind in counts
    ]
    ax.legend(handles=handles, title="trials by outcome (mark: last report)")
    ax.set_xlabel("step")
    ax.set_ylabel(reported or "intermediate value")
    ax.set_title("intermediate values")
    return ax


def _labelled(ax: Any, y: str | None) -> Any:
    """Optuna's plot with its y axis named `y` (where known)."""
    if y:
        ax.set_ylabel(y)
    return ax


def _figure_of(drawn: Any) -> Any:
    axes = drawn.ravel() if hasattr(drawn, "ravel") else [drawn]
    return axes[0].figure


def draw_study(
    study: Any,
    out_dir: Path,
    outcomes: dict[int, str] | None = None,
    references: Sequence[tuple[str, float]] = (),
    param_references: Sequence[tuple[str, str, float]] = (),
) -> tuple[list[Path], list[str]]:
    """The plots of `study`, each a PNG (and SVG) in `out_dir` in the house style, and a line for each plot
    declined (too few trials for importances, say). `references`: (label, value) lines on the history
    (baselines, the theory's value of the objective); `param_references`: (label, param, value) lines on
    that param's slice."""
    from optuna.exceptions import ExperimentalWarning

    written: list[Path] = []
    declined: list[str] = []
    with context(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)  # Optuna marks its matplotlib plots experimental
        for stem, plot in _plots(study, outcomes, references, param_references):
            try:
                fig = _figure_of(plot())
            except (ValueError, RuntimeError) as exc:  # Optuna's word for "this study cannot be drawn so"
                declined.append(f"{stem}: {exc}")
                continue
            if stem in OURS:
                for ax in fig.axes:
                    _one_two_five(ax)
            else:
                _fit(fig)
            for ax in fig.axes[:1]:  # the study named in each plot's title (Optuna's name only the plot)
                ax.set_title(f"{study.study_name}: {ax.get_title()[:1].lower()}{ax.get_title()[1:]}")
            # Optuna puts legends outside its axes: the saved page is cut around everything drawn
            written += save_figure(fig, out_dir, _file_name(study.study_name, stem), tight=True)
    return written, declined


def _fit(fig: Any) -> None:
    """Optuna's figure made to fit the page (PLOT_SIZE), and a legend of one entry per trial (the
    intermediate values of 40 trials) replaced by a title saying so. A log axis spanning about a decade
    labels its minor ticks ('3×10⁻¹', '4×10⁻¹'), which ran into each other on the slice plot: there it
    is labelled at 1, 2 and 5 times the powers of ten instead."""
    if len(fig.axes) <= 2:  # one plot (and its colour bar); a slice of several params keeps Optuna's width
        fig.set_size_inches(*PLOT_SIZE)
    for ax in fig.axes:
        _one_two_five(ax)
        legend = ax.get_legend()
        if legend is not None and len(legend.get_texts()) > MAX_LEGEND:
            legend.remove()
            ax.set_title(f"{ax.get_title()}: one line per trial ({len(legend.get_texts())} trials)")


def _one_two_five(ax: Any) -> None:
    """An x axis on a log scale spanning half a decade to two: labels at 1, 2 and 5 x 10^k only (narrower,
    matplotlib's own labels are few; wider, it labels the powers of ten alone)."""
    from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

    low, high = ax.get_xlim()
    if ax.get_xscale() != "log" or low <= 0 or not 0.5 <= math.log10(high / low) <= 2:
        return
    ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    # every major tick labelled (its default labels only some once the axis spans more than a decade)
    ax.xaxis.set_major_formatter(LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(math.inf, math.inf)))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _file_name(study: str, stem: str) -> str:
    """A file name for a study's plot: a swept study's name holds brackets, '=' and maybe '/'."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in study)
    return f"{safe}_{stem}"


def study_figures(
    root: str | os.PathLike[str],
    name: str,
    trials: pd.DataFrame,
    out_dir: Path,
    references: Sequence[tuple[str, float]] = (),
    param_references: Sequence[tuple[str, str, float]] = (),
) -> StudyFigures:
    """The plots and trial summary of study `name` (the plots left out, with the reason, where its
    storage cannot be opened from here)."""
    mine = trials[trials["study"] == name]
    storage = str(mine["storage"].iloc[-1]) if not mine.empty else ""
    out = StudyFigures(name, storage)
    out.states, out.best = trial_summary(trials, name)
    if mine.empty:
        out.note = "No trial of this study is in the store's trials/ table."
        return out
    try:
        study = load_study(root, name, storage)
    except (ValueError, KeyError) as exc:  # KeyError: Optuna's "study not found" in this storage
        out.note = f"Optuna's plots are left out: {exc}."
        return out
    if len(study.directions) > 1:
        out.best = None  # no single best: the Pareto front is the answer
    elif study.direction.name == "MAXIMIZE":
        out.states, out.best = trial_summary(trials, name, maximize=True)
    status = mine["run_status"] if "run_status" in mine else pd.Series(None, index=mine.index)
    ended = {int(n): outcome(str(st), rs) for n, st, rs in zip(mine["number"], mine["state"], status, strict=True)}
    out.images, declined = draw_study(study, out_dir, ended, references, param_references)
    if declined:
        out.note = "Optuna declined: " + "; ".join(declined)
    return out
