"""The decided claims as a table: each claim's result on the grid that decided it (`ClaimResult`: the
verdict, the grid's size and how much of it ran, whether it surprises), the frame `convgrid check --csv` and
the report write, the text `convgrid check` prints, and the tallies both count (`Tally`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from analysis.claim_types import DECIDED, HOLDS, NO_DATA, UNDECIDED, Claim, Verdict


@dataclass
class ClaimResult:
    claim: Claim
    grid: str | None
    verdict: Verdict
    complete: bool  # of the grid; a study ends at its trial budget, so an extra source has no "complete"
    reduced: bool = False
    n_wanted: int = 0  # runs the grid asks for
    n_finished: int = 0  # of those, runs with a final status
    extra: tuple[str, ...] = ()  # the extra sources read (full study names)
    # a reduced twin's own setting (its grid file's description): the claim's regime is the full grid's
    twin_regime: str = ""

    @property
    def sources(self) -> str:
        """The grid and the extra sources its verdict read, as one label."""
        return " + ".join([self.grid or "-", *self.extra])

    @property
    def size(self) -> str:
        """The grid's kind (reduced or full) and, while not all of it has run, how much did: a verdict on half
        a grid must not read like one on the whole grid."""
        if self.grid is None:
            return "-"
        kind = "reduced" if self.reduced else "full"
        return kind if self.complete else f"{kind}, partial: {self.n_finished} of {self.n_wanted} runs"

    @property
    def decided(self) -> bool:
        return self.verdict.verdict in DECIDED

    @property
    def regime(self) -> str:
        """Where the runs read sit: for a reduced twin its own setting, never the full grid's text."""
        if self.reduced:
            return self.twin_regime or f"reduced twin {self.grid}: smaller than the full grid's regime, decides nothing"
        return self.verdict.regime or self.claim.regime

    @property
    def spec(self) -> str:
        return self.verdict.spec or self.claim.spec

    @property
    def paper(self) -> str:
        return self.verdict.paper or self.claim.paper_says

    @property
    def lacks(self) -> str:
        """For an undecided claim, what it lacks, in one line ("" once decided)."""
        if self.decided:
            return ""
        if self.verdict.lacks:
            return " ".join(self.verdict.lacks.split())
        if self.verdict.verdict == UNDECIDED:
            return f"a longer budget: {self.verdict.budget}" if self.verdict.budget else "a longer budget"
        return " ".join(self.verdict.measured.split())

    @property
    def surprising(self) -> bool:
        """A verdict other than the expected one, on a complete full-size grid (a reduced grid's
        budgets are too small to decide a paper's claim; it only exercises the path). Undecided verdicts
        (no data, or a budget short of the paper's) are never surprises."""
        return self.complete and not self.reduced and self.decided and self.verdict.verdict != self.claim.expected


FRAME_COLUMNS = [
    "claim",
    "grid",
    "extra",
    "size",
    "verdict",
    "expected",
    "measured",
    "paper",
    "theory",
    "complete",
    # added by issue 29 (the original columns above keep their names and meaning)
    "task",
    "statement",
    "spec",
    "regime",
    "budget",
    "decided",
    "surprising",
    "lacks",
    "why_expected",
    # added by issue 43
    "post_hoc",
    "history",
]


def history_text(claim: Claim) -> str:
    """The claim's rule changes as one line each, oldest first ("" without any)."""
    return "\n".join(change.text() for change in claim.history)


@dataclass
class ClaimsTable:
    results: list[ClaimResult] = field(default_factory=list)

    def present(self) -> list[ClaimResult]:
        """The claims one of whose grids is in the store (the others read no run at all)."""
        return [r for r in self.results if r.grid is not None]

    def frame(self) -> pd.DataFrame:
        rows = [
            {
                "claim": r.claim.id,
                "grid": r.grid or "-",
                "extra": ", ".join(r.extra),
                "size": r.size,
                "verdict": r.verdict.verdict,
                "expected": r.claim.expected,
                "measured": r.verdict.measured,
                "paper": r.paper,
                "theory": r.verdict.theory,
                "complete": r.complete,
                "task": r.claim.task,
                "statement": r.claim.statement,
                "spec": r.spec,
                "regime": r.regime,
                "budget": r.verdict.budget,
                "decided": r.decided,
                "surprising": r.surprising,
                "lacks": r.lacks,
                "why_expected": r.claim.why_expected if r.claim.expected != HOLDS else "",
                "post_hoc": r.claim.post_hoc,
                "history": history_text(r.claim),
            }
            for r in self.results
        ]
        return pd.DataFrame(rows, columns=FRAME_COLUMNS)

    def format(self, show_all: bool = False) -> str:
        """The claims whose grids are in the store (every registered claim with `show_all`): our number beside
        the paper's and the spec's reference, the regime decided in, and for an undecided claim what it lacks."""
        lines = []
        for r in self.results if show_all else self.present():
            mark = "!!" if r.surprising else "  "
            size = "" if r.grid is None else f" [{r.size}]"
            post = " [post hoc: outside the tallies]" if r.claim.post_hoc else ""
            lines.append(
                f"{mark} {r.claim.id}: {r.verdict.verdict} (expected {r.claim.expected}) on {r.sources}{size}{post}"
            )
            lines.append(f"     {r.claim.statement}")
            if not r.decided:
                lines.append(f"     lacks: {r.lacks}")
            if r.verdict.measured and r.verdict.verdict != NO_DATA:
                lines.append(f"     ours: {r.verdict.measured}")
            for label, text in (
                ("paper", r.paper),
                ("spec", r.spec),
                ("theory", r.verdict.theory),
                ("regime", r.regime),
                ("budget", r.verdict.budget),
            ):
                if text:
                    lines.append(f"     {label}: {text}")
            if r.claim.why_expected and r.claim.expected != HOLDS:
                lines.append(f"     why expected: {r.claim.why_expected}")
            for change in r.claim.history:
                lines.append(f"     rule changed {change.text()}")
        return "\n".join(lines)

    def tally(self, show_all: bool = False) -> Tally:
        """The counts `convgrid check` and the report both print: one definition of decided and undecided."""
        listed = self.results if show_all else self.present()
        shown = [r for r in listed if not r.claim.post_hoc]  # post hoc claims stand outside the tallies
        return Tally(
            claims=len(shown),
            decided=sum(r.decided for r in shown),
            undecided=sum(r.verdict.verdict == UNDECIDED for r in shown),
            surprises=sum(r.surprising for r in shown),
            post_hoc=len(listed) - len(shown),
        )

    def summary(self, show_all: bool = False) -> str:
        """One line: how many claims are listed, decided, undecided, and surprising."""
        hidden = (
            ""
            if show_all
            else f" ({len(self.results) - len(self.present())} more without their grids: --all lists them)"
        )
        tally = self.tally(show_all)
        return f"{tally.claims} claims{hidden}: {tally.text()}"


@dataclass(frozen=True)
class Tally:
    """How many claims (post hoc ones apart) are decided (holds / does not hold), undecided at their budget,
    and without enough data; and how many decided ones differ from the expected verdict."""

    claims: int
    decided: int
    undecided: int  # "undecided at this budget": ran, but short of the paper's budget
    surprises: int
    post_hoc: int

    @property
    def no_data(self) -> int:
        return self.claims - self.decided - self.undecided

    def text(self) -> str:
        return (
            f"{self.decided} decided, {self.undecided} undecided at their budget, {self.no_data} without enough "
            f"data; {self.surprises} differ from the expected verdict on complete full grids"
            + (f"; {self.post_hoc} post hoc or investigations listed outside these counts" if self.post_hoc else "")
        )
