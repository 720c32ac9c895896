"""What a claim is and what deciding it returns: the `Claim` (a paper's checkable statement, the grids that
can decide it, its check and expected verdict, its regime and rule history), the `Verdict` its check returns,
and the four verdict texts. The registry and the rules every claim obeys are analysis/claims.py; the table of
decided claims is analysis/claims_table.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pandas as pd

VerdictText = Literal["holds", "does not hold", "undecided at this budget", "not enough data"]
HOLDS: VerdictText = "holds"
FAILS: VerdictText = "does not hold"
UNDECIDED: VerdictText = "undecided at this budget"  # ran, but short of the paper's budget and the trend is open
NO_DATA: VerdictText = "not enough data"
DECIDED = (HOLDS, FAILS)


@dataclass
class Verdict:
    verdict: VerdictText
    measured: str
    paper: str = ""
    theory: str = ""
    # numbers worth a table of their own: `convgrid report` shows it in the section of the grid that decided
    # the claim (column names as headers, floats to 4 significant digits)
    table: pd.DataFrame | None = None
    spec: str = ""  # the spec's reference number [OURS] for this run's setting (default: the claim's)
    regime: str = ""  # where these runs sit (default: the claim's)
    budget: str = ""  # the budget decided at against the paper's, when the verdict depends on it
    lacks: str = ""  # for an undecided verdict: what deciding it needs (default: a longer budget, or `measured`)


Check = Callable[[pd.DataFrame, pd.DataFrame | None], Verdict]

# Where a claim's randomness is in the problem (a draw of data or of a matrix), one draw decides nothing close
# (issue 43): a claim naming its draw column in `Claim.draws` is refused a verdict on fewer draws than this.
MIN_DRAWS = 3
CLOSE_DRAWS = 5  # draws needed when the paired mean difference is within twice their spread


@dataclass(frozen=True)
class RuleChange:
    """One change of a claim's rule after results had been read (issue 43): when, the rule and the verdict it
    replaced, and why. `needs` says what deciding the claim again under the new rule takes, while its store is
    gone and it stands undecided (`python -m analysis.repro_table reopen`); "" once it was decided again."""

    date: str
    old_rule: str
    old_verdict: str
    why: str
    needs: str = ""

    def text(self) -> str:
        return f"{self.date}: was '{self.old_rule}' ({self.old_verdict}); changed because {self.why}"


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
    extra: tuple[str, ...] = ()  # studies or grids read beside the grid (module docstring)
    # inside which hypotheses the grid's runs sit ("inside Thm 1: K >= n d, ...") or "practice: ..." for a
    # labelled check outside them; "" for an empirical claim decided in the paper's own setting
    regime: str = ""
    spec: str = ""  # the spec's independent reference number [OURS] beside the paper's, when it has one
    paper_says: str = ""  # the paper's number or statement (a verdict's own `paper` text takes precedence)
    # a claim narrowed or relabelled after its results were read, or a labelled investigation beside the
    # paper's claim: listed, but outside the tallies (issue 43)
    post_hoc: bool = False
    history: tuple[RuleChange, ...] = ()  # every change of the rule after results were read, oldest first
    # the run column naming the problem draw (data or matrix seed) when the randomness is in the problem: the
    # claim is then refused a verdict on fewer than MIN_DRAWS distinct draws among the grid's runs. Several
    # columns joined by "+" (a target and a data seed) count distinct combinations; a learner's data seed left
    # unset (None) is its run seed, so a missing value there reads the run's `seed`
    draws: str = ""


def twins(*stems: str) -> tuple[str, ...]:
    """A claim's grids: each full grid named, then each one's reduced twin `small_<stem>`, in the order
    `evaluate` prefers them (the first present decides)."""
    return (*stems, *(f"small_{stem}" for stem in stems))
