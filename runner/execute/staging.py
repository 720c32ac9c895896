"""Workers write their runs' curves to the results root; the driver gets a manifest (issue 27).

Every finished run's curve used to travel from its worker to the one driver, which converted and wrote
every row: at a thousand nodes and curves of 10^5 steps, one Python process and one link carry it all.
Where a worker can reach the root, it writes the curve rows itself as a staged part
(runner.store.incoming) and sends only the runs rows and the part's name (`RunRecord.staged`); the
driver commits them with the store's usual protocol, publishing the part unread. So the driver's CPU
and memory per run no longer grow with the curve (benchmarks/ingest.py).

Which workers can: decided at start-up, per Ray node, never by failing a run (`probe_nodes`). The
driver writes a probe file under the session's folder; one actor per node reads it back and writes a
reply beside it (never creating a folder: a local path on another node does not exist there, and
nothing is left on that node's disk); the nodes whose replies the driver reads are the ones that
stage. A worker on any other node (an actor restarted elsewhere, a node that joined later) sends its
rows to the driver as before. The in-process and warm-start executors write from the driver: the same
rows on disk either way.

When a worker stages (`Stager`): a run's record is held until the records held have `rows` curve rows
(one part for them all), or until holding it longer would keep it past `wait_s` given how long the
last run took, or its chunk ends; so parts are few and large for short runs, one per run for long ones,
and no record waits for long behind a slow run. A write that fails sends the records' rows to the
driver instead.

The executor contract changes here: an executor that stages sees the results root, credentials
included where the URI has them. They travel to the workers in the `StagingTarget`, whose repr and every
message redact them (runner.errors.redact).
"""

from __future__ import annotations

import os
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import pyarrow as pa

from runner.errors import redact
from runner.fs.files import delete_quietly, ensure_dir, read_bytes, write_bytes
from runner.fs.root import Root, open_root
from runner.store.compact import CURVE_ROWS_PER_PART
from runner.store.records import RunRecord, StagedPart

# A part is written once the records held have this many curve rows: the size `compact` cuts curve
# parts to (runner.store.compact.CURVE_ROWS_PER_PART), so a part is never one that compaction must
# merge for its size alone; ~24 MB of Arrow held at most, per worker.
STAGE_ROWS = CURVE_ROWS_PER_PART
# How long a finished run's record may be held in its worker to share a part and a message to the driver
# with the next ones: well inside the driver's default flush window (2 s). Parts and messages per
# worker then come at most 1 / STAGE_WAIT_S a second, however fast its runs (docs/scale.md).
STAGE_WAIT_S = 0.5
PROBE_TIMEOUT_S = 30.0


class StagingFallback(UserWarning):
    """Workers that could stage their curves under the results root send them to the driver instead."""


@dataclass(frozen=True)
class StagingTarget:
    """Where workers on `nodes` (Ray node ids) write their runs' curves: `folder` (relative, the
    driver's session in _store/incoming/) of the results root `root` (a local path as the driver sees it,
    or a URI, possibly with credentials: never printed unredacted)."""

    root: str = field(repr=False)
    folder: str
    nodes: frozenset[str]
    rows: int = STAGE_ROWS
    wait_s: float = STAGE_WAIT_S

    def __repr__(self) -> str:
        return f"StagingTarget(root={redact(self.root)!r}, folder={self.folder!r}, nodes={len(self.nodes)})"


@runtime_checkable
class StagesResults(Protocol):
    """An executor whose workers may write their runs' curves to the results root themselves."""

    def stage_to(self, root: str) -> str | None:
        """Let workers that can reach `root` stage there; returns the session's folder (relative) that
        the driver cleans when all is committed, or None where no worker stages."""
        ...


def worker_root(root: str, base: str) -> str:
    """The root as a worker must be told it: a URI as given, a local path as the driver resolved it (a
    worker's working directory is not the driver's)."""
    return root if "://" in root else base


def stage_results(executor: object, root: str, base: str) -> str | None:
    """Ask `executor` to have its workers stage their curves under the results root (see the module);
    returns the session folder to clean afterwards, or None."""
    if isinstance(executor, StagesResults):
        return executor.stage_to(worker_root(root, base))
    return None


def open_target(root: str) -> Root:
    fs, base = open_root(root)
    return Root(fs, base)


def probe_nodes(actors: Sequence[Any], root: str, folder: str, timeout_s: float = PROBE_TIMEOUT_S) -> frozenset[str]:
    """The Ray nodes whose workers read and write the root as this driver sees it (see the module):
    one probe per node, through the first of `actors` placed there."""
    import ray

    files = open_target(root)
    nonce = uuid.uuid4().hex
    probe = f"{folder}/probe-{nonce}"
    try:
        ensure_dir(files.fs, files.abs(folder))
        write_bytes(files.fs, files.abs(probe), nonce.encode())
    except OSError as exc:
        # the driver cannot write there either (a full disk, a quota): no worker stages, and the driver
        # takes every curve row itself; its own flush says more if the root stays unwritable
        warnings.warn(
            f"convgrid: cannot write the staging folder {redact(files.abs(folder))} "
            f"({redact(f'{type(exc).__name__}: {exc}')}): workers send their curve rows to the driver instead",
            StagingFallback,
            stacklevel=2,
        )
        return frozenset()
    placed = {ref: actor for actor, ref in ((a, a.placement.remote()) for a in actors)}
    ready, _ = ray.wait(list(placed), num_returns=len(placed), timeout=timeout_s)
    by_node: dict[str, Any] = {}
    for ref in ready:
        try:
            node, _device = ray.get(ref)
        except Exception:  # noqa: BLE001 - an actor that cannot answer stages nothing
            continue
        by_node.setdefault(node, placed[ref])
    asked = {actor.answer_probe.remote(root, probe, f"{probe}-{node}"): node for node, actor in by_node.items()}
    ready, _ = ray.wait(list(asked), num_returns=len(asked), timeout=timeout_s)
    nodes = set()
    for ref in ready:
        node = asked[ref]
        try:
            if ray.get(ref) and read_bytes(files.fs, files.abs(f"{probe}-{node}")).decode() == f"{nonce} {node}":
                nodes.add(node)
        except Exception:  # noqa: BLE001 - a reply this driver cannot read: that node does not stage
            continue
    for node in by_node:
        delete_quietly(files.fs, files.abs(f"{probe}-{node}"))
    delete_quietly(files.fs, files.abs(probe))
    if len(nodes) < len(by_node):
        warnings.warn(
            f"convgrid: workers on {len(by_node) - len(nodes)} of {len(by_node)} nodes cannot write "
            f"{redact(files.abs(folder))} (or answered no probe within {timeout_s:g} s): they send their curve "
            "rows to the driver instead",
            StagingFallback,
            stacklevel=2,
        )
    return frozenset(nodes)


def answer_probe(root: str, probe: str, reply: str, node: str) -> bool:
    """In a worker: read the driver's probe and write the reply beside it (into a folder that must
    exist already). False where either fails."""
    try:
        files = open_target(root)
        nonce = read_bytes(files.fs, files.abs(probe)).decode()
        with files.fs.open_output_stream(files.abs(reply)) as out:
            out.write(f"{nonce} {node}".encode())
    except Exception:  # noqa: BLE001 - any failure means: this node does not stage
        return False
    return True


@dataclass
class _Held:
    """The records held for one part of one task: their runs rows, and each one's curve rows as Arrow
    (a fifth of the memory of Python lists of floats)."""

    batch_id: str
    records: list[RunRecord] = field(default_factory=list)
    pieces: list[pa.Table] = field(default_factory=list)
    rows: int = 0


class Stager:
    """In a worker, for one chunk: holds finished records and writes their curves as staged parts
    (see the module). `offer` each record as its run finishes and send what it returns; `drain` at the
    chunk's end."""

    def __init__(self, target: StagingTarget, files: Root, clock: Callable[[], float] = time.monotonic) -> None:
        self.target, self.files, self.clock = target, files, clock
        self.folder = f"{target.folder}/w{os.getpid()}"
        self._held: dict[str, _Held] = {}  # task -> what its next part holds
        self._rows = 0
        self._since = 0.0  # when the oldest record held arrived
        self._last = clock()  # when the last record arrived (first: the chunk's start)
        self.failed = False  # the root refused a write: the rest of the chunk goes to the driver

    def offer(self, record: RunRecord) -> list[RunRecord]:
        now = self.clock()
        took, self._last = now - self._last, now
        if not record.curve.get("step") or self.failed:
            return [record]  # nothing to stage: the record goes at once
        held = self._held.get(record.task) or _Held(uuid.uuid4().hex)
        try:
            from runner.grid.schema import task_schemas
            from runner.store.flush import curve_table

            piece = curve_table([record], task_schemas(record.task)[1])
        except Exception as exc:  # noqa: BLE001 - a value the table refuses: the driver isolates that record
            self._warn(exc)
            return [record]
        if not self._held:
            self._since = now
        self._held[record.task] = held
        held.records.append(RunRecord(record.run_id, record.task, record.row, log=record.log))
        held.pieces.append(piece)
        held.rows += piece.num_rows
        self._rows += piece.num_rows
        if self._rows >= self.target.rows or now - self._since + took >= self.target.wait_s:
            return self.drain()
        return []

    def drain(self) -> list[RunRecord]:
        held, self._held, self._rows = self._held, {}, 0
        return [record for task, part in held.items() for record in self._stage(task, part)]

    def _stage(self, task: str, held: _Held) -> list[RunRecord]:
        from runner.store.incoming import write_staged

        table = pa.concat_tables(held.pieces)
        try:
            path = write_staged(self.files, self.folder, table)
        except Exception as exc:  # noqa: BLE001 - the rows go to the driver instead, as without staging
            self.failed = self.failed or isinstance(exc, OSError)
            self._warn(exc)
            return [_inline(r, piece) for r, piece in zip(held.records, held.pieces, strict=True)]
        part = StagedPart(path, task, held.batch_id, len(held.records), table.num_rows, table.schema)
        return [
            RunRecord(
                r.run_id, r.task, {**r.row, "batch_id": held.batch_id, "curve_rows": piece.num_rows}, {}, part, r.log
            )
            for r, piece in zip(held.records, held.pieces, strict=True)
        ]

    def _warn(self, exc: BaseException) -> None:
        warnings.warn(
            f"convgrid: could not stage curve rows under {redact(self.target.root)} "
            f"({redact(f'{type(exc).__name__}: {exc}')}); sending them to the driver",
            StagingFallback,
            stacklevel=3,
        )


def _inline(record: RunRecord, piece: pa.Table) -> RunRecord:
    """The record with its curve rows back in it, as the driver takes them without staging."""
    return RunRecord(record.run_id, record.task, record.row, piece.drop_columns(["run_id"]).to_pydict(), log=record.log)
