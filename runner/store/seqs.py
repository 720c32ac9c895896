"""What a stored commit sequence (`commit_seq`, runner.store.flush) may be, and the largest one a flush
may build on.

A flush numbers its attempts one more than the largest `commit_seq` of the task's attempts; it used to
take each part's footer maximum on trust, so one part with 2^63 - 1 (a valid name, size and CRC: made
on purpose or by a tool) overflowed every later flush of the task, and a part written without
statistics read as 0, which repeats numbers. Now:

  - statistics missing for some of a part's values: the column itself is read (one column, once);
  - a value is possible only within what the store itself could have committed: each commit adds at
    least one attempts row of its number, so no number exceeds the task's attempts rows (plus
    SEQ_HEADROOM, for rows lost to quarantine since); none is below 1. A part with an impossible one is
    marked damaged, as a part whose bytes fail: readers skip it, `status` names it, `compact --repair`
    moves it to quarantine. Since every commit adds a row as it adds one to the number, a store inside
    the bound stays inside it, and the number never nears int64's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow.compute as pc

from runner.store.parts import DamagedPart, PartReader

COLUMN = "commit_seq"
# Rows a task may have lost (to quarantine) since their commits were numbered: far beyond any store.
SEQ_HEADROOM = 2**32


class ImpossibleSeq(DamagedPart):
    """A part holding a commit sequence the store cannot have committed."""


@dataclass(frozen=True)
class SeqRange:
    low: int
    high: int
    rows: int


def seq_range(reader: PartReader, rel: str) -> SeqRange | None:
    """The smallest and largest `commit_seq` of a readable part and its row count; None for a part
    without the column (a store from before it), with only nulls, or not readable. From the footer's
    statistics where every row group has them, else from the column itself (never a 0 for unknown)."""
    schema = reader.schema(rel)
    if schema is None or COLUMN not in schema.names:
        return None
    metadata = reader.metadata(rel)
    leaves = [i for i in range(metadata.num_columns) if metadata.schema.column(i).path == COLUMN]
    lows, highs, complete = [], [], bool(leaves)
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        stats = group.column(leaves[0]).statistics if leaves else None
        if stats is not None and stats.has_min_max:
            lows.append(int(stats.min))
            highs.append(int(stats.max))
        elif group.num_rows and (stats is None or stats.null_count != group.num_rows):
            complete = False  # values the footer says nothing of
    if not complete:
        column = reader.read([rel], schema, [COLUMN])[COLUMN]
        bounds = pc.min_max(column)
        if not bounds["min"].is_valid:
            return None
        lows, highs = [bounds["min"].as_py()], [bounds["max"].as_py()]
    if not highs:
        return None
    return SeqRange(min(lows), max(highs), metadata.num_rows)


def checked_max(
    reader: PartReader,
    attempts: Sequence[str],
    others: Sequence[str] = (),
    cache: dict[str, SeqRange | None] | None = None,
) -> int:
    """The largest `commit_seq` of a task's readable `attempts` parts (0: none), every part of `attempts`
    and `others` (its runs parts) checked against the bound above: one outside it is marked damaged
    (ImpossibleSeq, naming the value) and counts for nothing. `cache`: ranges already known (parts are
    immutable), filled in here."""
    known = {} if cache is None else cache
    ranges: dict[str, SeqRange | None] = {}
    for rel in dict.fromkeys([*attempts, *others]):
        if rel not in known:
            known[rel] = seq_range(reader, rel)
        ranges[rel] = known[rel]
    rows = sum(r.rows for rel, r in ranges.items() if r is not None and rel in attempts)
    if not any(r is not None for rel, r in ranges.items() if rel in attempts):
        rows = sum(r.rows for r in ranges.values() if r is not None)  # a store from before attempts/
    limit = rows + SEQ_HEADROOM
    largest = 0
    for rel, found in ranges.items():
        if found is None:
            continue
        if found.low < 1 or found.high > limit:
            bad = found.high if found.high > limit else found.low
            reader.mark_damaged(
                rel,
                ImpossibleSeq(
                    f"commit_seq {bad} is not one this store can have committed (1 to {limit:_}: the task's "
                    f"{rows} attempt rows plus {SEQ_HEADROOM:_})"
                ),
            )
            continue
        if rel in attempts:
            largest = max(largest, found.high)
    return largest
