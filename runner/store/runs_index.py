"""Where a flush finds the stored rows of the runs it writes: each runs part indexed once by the
sorted 64-bit keys of its run ids (8 bytes a run), updated by the parts that appeared or went since
the last look (parts are immutable and uniquely named). A flush of new runs reads nothing back, and a
flush that supersedes stored runs reads only the parts that hold them."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from runner.fs.root import Root
from runner.store.index_keys import PartKeys, part_batches
from runner.store.parts import PartReader
from runner.store.seqs import SeqRange, checked_max

# what `RunsIndex.stored_rows` answers
ROWS_FOUND = pa.schema([("part", pa.string()), ("run_id", pa.string()), ("batch_id", pa.string())])


class RunsIndex:
    def __init__(self, files: Root, reader: PartReader) -> None:
        self.files, self.reader = files, reader
        self._part_keys: dict[str, dict[str, PartKeys]] = {}  # task -> runs part -> the keys of its run ids
        self._seqs: dict[str, SeqRange | None] = {}  # part -> its commit sequences (runner.store.seqs)

    def next_seq(self, attempt_parts: Sequence[str], run_parts: Sequence[str] = ()) -> int:
        """The commit sequence of the task's next transaction: one more than the largest in its attempts
        (every attempt ever committed, so a repair or compaction of runs/ never lowers it), each part's
        range read once (parts are immutable) and checked (runner.store.seqs: a part holding a number
        the store cannot have committed is marked damaged and counts for nothing)."""
        return checked_max(self.reader, attempt_parts, run_parts, self._seqs) + 1

    def written(self, part: str, seq: int, rows: int) -> None:
        """An attempts part this process is writing holds `rows` rows, of commit sequence `seq` at most."""
        self._seqs[part] = SeqRange(1, seq, rows)

    def remember(self, task: str, part: str, table: pa.Table) -> None:
        """Index a runs part this process is writing, sparing the next flush from reading it back
        (if its transaction fails, the part is never visible and the next flush forgets it)."""
        self._part_keys.setdefault(task, {})[part] = PartKeys.of(table["run_id"])

    def _read_keys(self, part: str) -> PartKeys:
        """The keys of a runs part's ids, read in batches (a million-row part's ids as one column were
        ~120 MB of a flush); a part that fails midway is marked damaged and holds nothing, as on read."""
        try:
            return PartKeys.join(
                [PartKeys.of(b.column("run_id")) for b in part_batches(self.files.fs, self.files.abs(part), ["run_id"])]
            )
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException) as exc:
            self.reader.mark_damaged(part, exc)
            return PartKeys.join([])

    def stored_rows(self, task: str, parts: Sequence[str], run_ids: Sequence[str]) -> pa.Table:
        """(part, run_id, batch_id) of the rows of `run_ids` in the given runs parts."""
        known = self._part_keys.setdefault(task, {})
        visible = set(self.reader.readable(parts))
        for gone in set(known) - visible:
            del known[gone]
        for new in sorted(visible - set(known)):
            known[new] = self._read_keys(new)
        wanted = PartKeys.of(pa.array(run_ids, pa.string()))
        rows = [ROWS_FOUND.empty_table()]
        for part in sorted(visible):
            if not known[part].meets(wanted):
                continue
            schema = self.reader.unified_schema([part])
            table = self.reader.read([part], schema, ["run_id", "batch_id"], pc.field("run_id").isin(run_ids))
            columns = {
                "part": pa.repeat(pa.scalar(part), table.num_rows),
                "run_id": table["run_id"],
                "batch_id": table["batch_id"],
            }
            rows.append(pa.table(columns, schema=ROWS_FOUND))
        return pa.concat_tables(rows)
