"""A run's output while it computes on a Ray worker, kept where its worker's death cannot take it.

A finished run's output travels in its record (runner.execute.run_output, runner.store.logs). A
worker that dies mid-run (SIGKILL, out of memory, its node lost) sends no record: its chunk is queued
again (runner.execute.ray_pool) and the run computed afresh, and what it printed until then would be
lost with the process. So an actor on a node that stages to the results root (runner.execute.staging)
rewrites each run's output, as it grows, to `<session>/live/<run id>.log` in the driver's session
folder under `_store/incoming/` (at most every run_output.LIVE_EVERY_S seconds, through the root's
filesystem and its path rules), and deletes it when the run ends. When a chunk dies with its actor the
driver reads the files of its unfinished runs, and the record of the attempt that runs each again
carries that output first, after a marker line (`with_earlier`). The files of a session go with the
session's folder (runner.store.incoming: deleted when its driver ends, or by the sweep once stale).

A run stopped by the hard timeout is asked for its output before its actor is killed (the actor's
control group answers while the run hangs: `ChunkActor.output`), so its `timeout` record keeps it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

from runner.fs.files import delete_quietly, ensure_dir, read_bytes
from runner.fs.root import Root
from runner.store.records import RunRecord


def live_folder(session: str) -> str:
    return f"{session}/live"


def live_path(session: str, run_id: str) -> str:
    return f"{live_folder(session)}/{run_id}.log"


class LiveFiles:
    """The sink of run_output.live on a worker: each run's text so far, rewritten whole (bounded by
    run_output.LIMIT), one file per run id; `ended` (a capture's end) deletes them."""

    def __init__(self, root: Root, session: str) -> None:
        self.root, self.session = root, session
        self._ready = False

    def __call__(self, run_ids: Sequence[str], text: str) -> None:
        if not self._ready:
            ensure_dir(self.root.fs, self.root.abs(live_folder(self.session)))
            self._ready = True
        data = text.encode("utf-8", "replace")
        for run_id in run_ids:
            # no fsync: what a killed process wrote stays in the page cache; a lost node takes it anyway
            with self.root.fs.open_output_stream(self.root.abs(live_path(self.session, run_id))) as out:
                out.write(data)

    def ended(self, run_ids: Sequence[str]) -> None:
        for run_id in run_ids:
            delete_quietly(self.root.fs, self.root.abs(live_path(self.session, run_id)))


def read_live(root: Root, session: str, run_ids: Iterable[str]) -> dict[str, str]:
    """The output the runs `run_ids` had written when their worker died: those with a live file."""
    found = {}
    for run_id in run_ids:
        with contextlib.suppress(OSError):
            found[run_id] = read_bytes(root.fs, root.abs(live_path(session, run_id))).decode("utf-8", "replace")
    return found


def with_earlier(record: RunRecord, earlier: str, why: str) -> None:
    """Put the output of an earlier attempt of the record's run that left no record (`why` it left none)
    before the record's own, each after a marker line."""
    own = f"[convgrid: this attempt]\n{record.log}" if record.log else ""
    record.log = f"[convgrid: an earlier attempt of this run, {why}, had written:]\n{earlier.rstrip()}\n{own}"
