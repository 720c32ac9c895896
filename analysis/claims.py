"""The claims registry: checkable statements of the papers, each a function of the runs of a grid.

A claim reads the runs of one named grid (its full version, or the reduced one CI runs) and returns
a Verdict: holds / does not hold / not enough data, with the measured numbers beside the paper's and
the theory's. Every claim records the verdict we expect; a known non-reproduction expects "does not
hold" and says why, so `convgrid check --strict` fails only on surprises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from analysis.aggregate import median, median_by, medians
from analysis.figures import is_reduced
from analysis.learners import learners
from analysis.learners import module as learner_module
from analysis.load import curves as load_curves
from analysis.load import load, members
from tasks.status import FINAL_STATUSES

__all__ = [
    "FAILS",
    "HOLDS",
    "NO_DATA",
    "Check",
    "Claim",
    "ClaimResult",
    "ClaimsTable",
    "Verdict",
    "VerdictText",
    "evaluate",
    "fmt",
    "median",
    "median_by",
    "medians",
    "registry",
]

VerdictText = Literal["holds", "does not hold", "not enough data"]
HOLDS: VerdictText = "holds"
FAILS: VerdictText = "does not hold"
NO_DATA: VerdictText = "not enough data"


@dataclass
class Verdict:
    verdict: VerdictText
    measured: str
    paper: str = ""
    theory: str = ""


Check = Callable[[pd.DataFrame, pd.DataFrame | None], Verdict]


@dataclass(frozen=True)
class Claim:
    id: str
    paper: str
    task: str
    grids: tuple[str, ...]  # grid names that can decide it, preferred first (full, then reduced)
    statement: str
    check: Check
    expected: VerdictText = HOLDS
    why_expected: str = ""
    needs_curves: bool = False


@dataclass
class ClaimResult:
    claim: Claim
    grid: str | None
    verdict: Verdict
    complete: bool
    reduced: bool = False
    n_wanted: int = 0  # runs the grid asks for
    n_finished: int = 0  # of those, runs with a final status

    @property
    def size(self) -> str:
        """The grid's kind (reduced or full) and, while not all of it has run, how much did: a verdict on half
        a grid must not read like one on the whole grid."""
        if self.grid is None:
            return "-"
        kind = "reduced" if self.reduced else "full"
        return kind if self.complete else f"{kind}, partial: {self.n_finished} of {self.n_wanted} runs"

    @property
    def surprising(self) -> bool:
        """A verdict other than the expected one, on a complete full-size grid (a reduced grid's
        budgets are too small to decide a paper's claim; it only exercises the path)."""
        decided = self.verdict.verdict != NO_DATA
        return self.complete and not self.reduced and decided and self.verdict.verdict != self.claim.expected


@dataclass
class ClaimsTable:
    results: list[ClaimResult] = field(default_factory=list)

    def frame(self) -> pd.DataFrame:
        rows = []
        for r in self.results:
            rows.append(
                {
                    "claim": r.claim.id,
                    "grid": r.grid or "-",
                    "size": r.size,
                    "verdict": r.verdict.verdict,
                    "expected": r.claim.expected,
                    "measured": r.verdict.measured,
                    "paper": r.verdict.paper,
                    "theory": r.verdict.theory,
                    "complete": r.complete,
                }
            )
        return pd.DataFrame(rows)

    def format(self) -> str:
        lines = []
        for r in self.results:
            mark = "!!" if r.surprising else "  "
            size = "" if r.grid is None else f" [{r.size}]"
            lines.append(
                f"{mark} {r.claim.id}: {r.verdict.verdict} (expected {r.claim.expected}) on {r.grid or '-'}{size}"
            )
            lines.append(f"     {r.claim.statement}")
            if r.verdict.measured:
                lines.append(f"     measured: {r.verdict.measured}")
            if r.verdict.paper:
                lines.append(f"     paper: {r.verdict.paper}")
            if r.verdict.theory:
                lines.append(f"     theory: {r.verdict.theory}")
            if r.claim.why_expected and r.claim.expected != HOLDS:
                lines.append(f"     why expected: {r.claim.why_expected}")
        return "\n".join(lines)


def registry() -> list[Claim]:
    """Every learner's CLAIMS (analysis/<task>/claims.py, or its package's claims module)."""
    claims: list[Claim] = []
    for task in learners():
        found = learner_module(task, "claims")
        if found is not None:
            claims.extend(found.CLAIMS)
    return claims


def evaluate(root: str, claims: Sequence[Claim] | None = None) -> ClaimsTable:
    """Decide every claim on the first of its grids present in the store."""
    table = ClaimsTable()
    member_frame = members(root)
    present = set(member_frame["grid"])
    for claim in claims if claims is not None else registry():
        grid = next((g for g in claim.grids if g in present), None)
        if grid is None:
            table.results.append(
                ClaimResult(
                    claim, None, Verdict(NO_DATA, f"none of the grids {', '.join(claim.grids)} is in the store"), False
                )
            )
            continue
        wanted = set(member_frame.loc[member_frame["grid"] == grid, "run_id"])
        try:
            runs = load(root, claim.task, grid=grid)
        except FileNotFoundError:
            runs = pd.DataFrame(columns=["run_id", "status"])
        finished = runs[runs["status"].isin(sorted(FINAL_STATUSES))]
        n_finished = len(wanted & set(finished["run_id"]))
        complete = n_finished == len(wanted)
        curves = load_curves(root, claim.task, runs=finished) if claim.needs_curves and not finished.empty else None
        verdict = claim.check(finished, curves) if not finished.empty else Verdict(NO_DATA, "no finished runs")
        table.results.append(
            ClaimResult(claim, grid, verdict, complete, is_reduced(grid), n_wanted=len(wanted), n_finished=n_finished)
        )
    return table


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
