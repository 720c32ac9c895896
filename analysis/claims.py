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
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from analysis.aggregate import median, median_by, medians
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
    "median",
    "median_by",
    "medians",
    "named",
    "on_drawn_problems",
    "registry",
]

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
