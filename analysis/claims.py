"""The claims registry: checkable statements of the papers, each a function of the runs of a grid.

A claim reads the runs of one named grid (its full version, or the reduced one CI runs) and returns
a Verdict: holds / does not hold / undecided at this budget / not enough data, with the measured numbers
beside the paper's, the spec's reference and the theory's. Every claim records the verdict we expect; a
known non-reproduction expects "does not hold" and says why, so `convgrid check --strict` fails only on
surprises.

Where a claim is decided matters as much as the verdict: `Claim.regime` says whether its runs sit inside a
theorem's hypotheses or are a labelled check of practice outside them, and a verdict reached at a budget
short of the paper's is "undecided at this budget" (with the budget in `Verdict.budget`) unless the measured
trend settles it. Only decided verdicts (holds / does not hold) count as surprises.

A claim that compares the grid's runs with those of a study (an Optuna-tuned baseline) or of another
grid names them in `extra`: their finished runs are handed to the check beside the grid's, and the
frame's `grid` column says which grid or study asked for each row (a run that several asked for
appears once per source). A swept study file stores one study per sweep combination, `name[k=v]`:
its plain `name` in `extra` stands for all of them. The claim needs at least one extra source in the
store; without any, its verdict is "not enough data" naming the missing ones.

This module holds the registry, `evaluate` and the rules every claim obeys whatever its check says; what a
claim and a verdict are is analysis/claim_types.py, the table of results analysis/claims_table.py (their
names are importable from here).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.aggregate import median, median_by, medians
from analysis.claim_types import (
    CLOSE_DRAWS,
    DECIDED,
    FAILS,
    HOLDS,
    MIN_DRAWS,
    NO_DATA,
    UNDECIDED,
    Check,
    Claim,
    RuleChange,
    Verdict,
    VerdictText,
    twins,
)
from analysis.claims_table import ClaimResult, ClaimsTable, Tally, history_text
from analysis.figures import is_reduced
from analysis.learners import learners
from analysis.learners import module as learner_module
from analysis.load import curves as load_curves
from analysis.load import finished_runs, grid_file, members

__all__ = [
    "FAILS",
    "HOLDS",
    "NO_DATA",
    "UNDECIDED",
    "Check",
    "Claim",
    "ClaimResult",
    "ClaimsTable",
    "MIN_DRAWS",
    "RuleChange",
    "Tally",
    "Verdict",
    "VerdictText",
    "paired_verdict",
    "evaluate",
    "extra_sources",
    "finished_runs",
    "fmt",
    "history_text",
    "median",
    "median_by",
    "medians",
    "named",
    "on_drawn_problems",
    "registry",
    "twins",
]


def registry() -> list[Claim]:
    """Every learner's CLAIMS (analysis/<task>/claims.py, or its package's claims module)."""
    claims: list[Claim] = []
    for task in learners():
        found = learner_module(task, "claims")
        if found is not None:
            claims.extend(found.CLAIMS)
    return claims


def named(source: str, names: Sequence[str]) -> bool:
    """Whether the grid or study `source` is one of `names`, or one study `name[k=v]` of a swept study file
    named there (the rule `extra` follows; checks use it to tell the extra sources' rows apart)."""
    return any(source == name or source.startswith(f"{name}[") for name in names)


def extra_sources(claim: Claim, present: set[str]) -> list[str]:
    """The stored grids and studies that `claim.extra` names."""
    return sorted(g for g in present if named(g, claim.extra))


def evaluate(root: str, claims: Sequence[Claim] | None = None) -> ClaimsTable:
    """Decide every claim on the first of its grids present in the store (with its extra sources)."""
    table = ClaimsTable()
    member_frame = members(root)
    present = set(member_frame["grid"])
    for claim in claims if claims is not None else registry():
        grid = next((g for g in claim.grids if g in present), None)
        if grid is None:
            needs = f"needs grid {' or '.join(claim.grids)} (convgrid run grids/{claim.task}/{claim.grids[0]}.yaml)"
            table.results.append(ClaimResult(claim, None, Verdict(NO_DATA, needs), False))
            continue
        wanted = set(member_frame.loc[member_frame["grid"] == grid, "run_id"])
        extra = extra_sources(claim, present)
        runs = finished_runs(root, claim.task, [grid, *extra])
        n_finished = len(wanted & set(runs.loc[runs["grid"] == grid, "run_id"]))
        if claim.extra and not extra:
            verdict = Verdict(NO_DATA, f"not in the store: {', '.join(claim.extra)} (grid or study)")
        elif n_finished == 0:
            verdict = Verdict(NO_DATA, "no finished runs")
        else:
            curves = load_curves(root, claim.task, runs=runs.drop_duplicates("run_id")) if claim.needs_curves else None
            verdict = _enforced(
                claim, runs[runs["grid"] == grid], claim.check(runs, curves), n_finished, len(wanted), is_reduced(grid)
            )
        table.results.append(
            ClaimResult(
                claim,
                grid,
                verdict,
                n_finished == len(wanted),
                is_reduced(grid),
                n_wanted=len(wanted),
                n_finished=n_finished,
                extra=tuple(extra),
                twin_regime=twin_regime(member_frame, grid),
            )
        )
    return table


def twin_regime(member_frame: pd.DataFrame, grid: str) -> str:
    """A reduced grid's own setting, as its grid file describes it ("" for a full grid, or where the file
    is gone: ClaimResult.regime then says only that it is a reduced twin)."""
    if not is_reduced(grid) or "source" not in member_frame:
        return ""
    description = grid_file(member_frame.loc[member_frame["grid"] == grid, "source"]).get("description")
    return f"reduced twin {grid}: {' '.join(description.split())}" if isinstance(description, str) else ""


def on_drawn_problems(
    claims: Sequence[Claim], draws: str, exempt: dict[str, str], moved: dict[str, RuleChange] | None = None
) -> list[Claim]:
    """`claims` of a learner whose randomness is in the problem, each declaring its draw column(s) `draws` (so
    that `evaluate` refuses it a verdict on fewer than MIN_DRAWS draws), except those in `exempt`, which maps a
    claim's id to why one seed's runs are no single draw deciding a margin (an identity checked to rounding, a
    count, a mean over many drawn test problems of an untrained method, fixed real data). `moved` names the
    claims whose recorded verdict the rule took away (decided on fewer draws): each gets its history entry."""
    ids = {c.id for c in claims}
    unknown = (set(exempt) | set(moved or {})) - ids
    if unknown:
        raise ValueError(f"named for the draws rule but not among the claims: {', '.join(sorted(unknown))}")
    out = []
    for c in claims:
        if c.id not in exempt:
            change = (moved or {}).get(c.id)
            c = dataclasses.replace(c, draws=draws, history=c.history + ((change,) if change else ()))
        out.append(c)
    return out


def n_draws(runs: pd.DataFrame, draws: str) -> int:
    """How many distinct problem draws `runs` hold by the columns `draws` names ("a+b": their combinations); a
    missing value (a data seed left unset, which the learners read as the run seed) counts as the run's `seed`."""
    keys = pd.DataFrame(index=runs.index)
    for col in draws.split("+"):
        values = runs[col] if col in runs else pd.Series(pd.NA, index=runs.index, dtype=object)
        keys[col] = values.where(values.notna(), runs["seed"]) if "seed" in runs else values
    return len(keys.dropna().drop_duplicates())


def _enforced(
    claim: Claim, grid_runs: pd.DataFrame, verdict: Verdict, n_finished: int, n_wanted: int, reduced: bool = False
) -> Verdict:
    """The rules every claim obeys whatever its check says (issue 43): a claim whose randomness is in the
    problem is not decided on fewer than MIN_DRAWS draws, and a verdict on part of a grid is no verdict on it.
    A reduced grid (CI or demo size, one seed) is exempt from the draws rule: its verdict only exercises the
    path, is labelled "reduced", is never a surprise and never enters a table, and the tests that plant faults
    in a learner read it (tests/test_claim_tests_catch_faults.py)."""
    if verdict.verdict not in DECIDED:
        return verdict

    def withheld(on: str, lacks: str) -> Verdict:
        return dataclasses.replace(
            verdict, verdict=UNDECIDED, measured=f"{verdict.verdict} on {on}: {verdict.measured}", lacks=lacks
        )

    draws = n_draws(grid_runs, claim.draws) if claim.draws else 0
    if claim.draws and not reduced and draws < MIN_DRAWS:
        return withheld(
            f"{draws} problem draw(s) ({claim.draws})",
            f"problem draws: {draws} of the {MIN_DRAWS} a claim on a drawn problem needs",
        )
    if n_finished < n_wanted:
        return withheld(
            f"{n_finished} of {n_wanted} runs", f"the rest of its grid: {n_finished} of {n_wanted} runs finished"
        )
    return verdict


def paired_verdict(diffs: Sequence[float], what: str = "learner - baseline") -> tuple[VerdictText, str, str]:
    """(verdict, measured, lacks) for "the learner beats the baseline" from paired differences, one per problem
    draw (issue 43). The rule is symmetric: holds when the mean difference exceeds twice its standard error,
    does not hold when it falls short by as much, undecided between; fewer than MIN_DRAWS draws decide
    nothing, and a mean within twice the draws' spread needs CLOSE_DRAWS draws."""
    d = np.asarray(list(diffs), dtype=float)
    n = len(d)
    if n == 0:
        return NO_DATA, "no paired draws", "paired draws"
    mean = float(d.mean())
    spread = float(d.std(ddof=1)) if n > 1 else math.inf
    band = 2 * spread / math.sqrt(n) if n > 1 else math.inf
    text = (
        f"{what} over {n} paired draw(s): mean {mean:+.4g}, spread (sd) {spread:.3g}, undecided band +-{band:.3g} "
        f"(2 standard errors); per draw: {', '.join(f'{x:+.4g}' for x in d)}"
    )
    need = CLOSE_DRAWS if abs(mean) <= 2 * spread else MIN_DRAWS
    if n < need:
        return UNDECIDED, text, f"problem draws: {n} of the {need} this margin needs"
    if mean > band:
        return HOLDS, text, ""
    if mean < -band:
        return FAILS, text, ""
    return UNDECIDED, text, f"a margin beyond +-{band:.3g} (2 standard errors over {n} draws): more draws"


# ---- helpers for claim functions ----------------------------------------------------------------
# The seed statistics (`medians`: unreached = inf; `median_by`, `median`: missing skipped) live in
# analysis.aggregate with those of the figures; learners' claims import them from here.


def fmt(series: pd.Series, digits: int = 3) -> str:
    """`key: value; ...` with `digits` significant digits (tuple keys joined by commas)."""
    parts = []
    for key, val in series.items():
        label = ", ".join(map(str, key)) if isinstance(key, tuple) else str(key)
        parts.append(f"{label}: {val:.{digits}g}")
    return "; ".join(parts)
