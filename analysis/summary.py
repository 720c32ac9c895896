"""What the report opens with: what ran (status counts over grids and studies), the failures grouped by
reason with their run ids, and the claims of the grids in the store as rows of our number beside the
paper's and the spec's."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from analysis.claims import ClaimsTable

NO_DATA = "not enough data"
# Numbers in an error line (a step, a value, a duration) differ from run to run; the reason does not.
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


@dataclass
class FailureGroup:
    """Runs that failed for one reason: the first line of their error, numbers aside."""

    reason: str  # the first run's error line, as it was written
    task: str
    run_ids: list[str] = field(default_factory=list)


def reason_key(line: str) -> str:
    """The error line with its numbers replaced, so that 'diverged at step 12' and '... 40' are one reason."""
    return _NUMBER.sub("#", line.strip())


def failure_groups(errors: Iterable[tuple[str, str, str]]) -> list[FailureGroup]:
    """(task, run id, error line) triples grouped by task and reason, the largest group first."""
    groups: dict[tuple[str, str], FailureGroup] = {}
    for task, run_id, line in errors:
        key = (task, reason_key(line))
        groups.setdefault(key, FailureGroup(line.strip() or "(no message)", task)).run_ids.append(run_id)
    return sorted(groups.values(), key=lambda g: (-len(g.run_ids), g.task, g.reason))


def claim_rows(claims: ClaimsTable) -> pd.DataFrame:
    """The claims decided on (or undecided for) a grid in the store, one row each: claim, grid, size,
    verdict, expected, ours, paper, spec (the spec's independent reference). A claim without enough data
    says in `ours` what it lacks."""
    frame = claims.frame()
    columns = ["claim", "grid", "size", "verdict", "expected", "ours", "paper", "spec"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    # the grid and the extra sources its verdict read, as `check` names them ("grid + study[k=v] + ...")
    frame = frame.assign(sources=[r.sources for r in claims.results])
    present = frame[frame["grid"] != "-"].copy()
    present["ours"] = present["measured"].where(present["verdict"] != NO_DATA, "lacks: " + present["lacks"].astype(str))
    present["grid"] = present["sources"]
    return present[columns].reset_index(drop=True)
