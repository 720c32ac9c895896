"""Transactions over part files: every change to the store (a driver's flush, a compaction, a repair)
adds parts and removes parts atomically for convgrid's readers.

The protocol, in the order it runs (each step durable before the next, but for 1 and 2: see below):

    1. staging   new parts are written under _store/staging/<txn>.part-* (no reader, no glob sees them),
                 or were written before by a worker under _store/incoming/ (runner.store.incoming)
    2. marker    _store/txn/<txn>.json names every add (staged -> final path), remove and move: the
                 commit point. Before it exists the transaction never happened; after, it did.
    3. publish   each staged part is renamed to its final path (runs/task=x/part-...parquet, ...)
    4. delete    the replaced parts are deleted (deletion last), damaged parts moved to quarantine
    5. done      the marker and the staging folder are removed

convgrid's readers honour the marker (`View`): a removed part is invisible from step 2 on, a staged
part is read in place until it is published. A process killed at any step leaves a state the next
writer (or any command: `recover`) rolls forward (a marker exists) or back (staging without a marker).
The staged parts' names and the marker's are fsynced together, so after a power cut (not a kill: the
kernel keeps what a killed process wrote) a marker may survive a staged name; `recover` rolls such a
marker back, as its writer never returned and nothing of it was published.
Plain Parquet clients see only final paths, so between steps 3 and 5 they may briefly see both old and
new parts: that is the transient state a killed command leaves until the next command runs.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import pyarrow as pa
import pyarrow.fs as pafs

from runner.coord.lease_lock import LockLost
from runner.fs.files import delete_quietly, ensure_dir, fsync_dir, is_local, read_bytes, write_bytes
from runner.fs.root import Root, SymlinkInRoot, UnsafePath, check_relative
from runner.store.files import encode_parquet, read_tail, write_durably
from runner.store.layout import LOGS, MEMBERS, TASK_KINDS, TRIALS
from runner.store.part_names import name_for, new_id, renamed, tail_of

INTERNAL = "_store"
# The folders of data a transaction may add to or remove from.
DATA_FOLDERS = frozenset({*TASK_KINDS, MEMBERS, TRIALS, LOGS})
TXN_DIR = f"{INTERNAL}/txn"
STAGING_DIR = f"{INTERNAL}/staging"
# Parts workers wrote for a driver to commit (runner.store.incoming): staged like staging's, but by
# another process, and cleaned by their own rule (never with staging's, which runs under every lock).
INCOMING_DIR = f"{INTERNAL}/incoming"
QUARANTINE_DIR = f"{INTERNAL}/quarantine"
# On an object store nothing tells a dead writer's staging from a live one's: leave it this long.
STALE_STAGING_S = 3600.0

_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="convgrid-store")
_PUBLISHING = ThreadPoolExecutor(max_workers=16, thread_name_prefix="convgrid-publish")

# The phases a transaction passes through, in order. Fault tests install a hook in PHASE_HOOKS that
# kills the process at one of them (tests/kill_at.py); production code installs none.
PHASES = ("staging", "staged", "marked", "publishing", "published", "deleting", "deleted")
# (phase, the transaction's label: flush, compact, merge, append; or "incoming": a worker's staged part,
# runner.store.incoming, which reaches "staged" once written)
PhaseHook = Callable[[str, str], None]
PHASE_HOOKS: list[PhaseHook] = []


def reached(phase: str, label: str) -> None:
    for hook in PHASE_HOOKS:
        hook(phase, label)


@dataclass
class Marker:
    """What one committed transaction does; paths are relative to the root."""

    txn: str
    adds: list[tuple[str, str]] = field(default_factory=list)  # (staged, final)
    removes: list[str] = field(default_factory=list)
    moves: list[tuple[str, str]] = field(default_factory=list)  # (damaged part, quarantine path)

    def to_json(self) -> bytes:
        body = {"txn": self.txn, "adds": self.adds, "removes": self.removes, "moves": self.moves}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Marker:
        """The marker, its every path checked (`check_paths`); MarkerError for anything else."""
        try:
            body = json.loads(data)
            marker = cls(
                str(body["txn"]),
                [(str(a), str(b)) for a, b in body["adds"]],
                [str(r) for r in body["removes"]],
                [(str(a), str(b)) for a, b in body.get("moves", [])],
            )
        except (ValueError, TypeError, KeyError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise MarkerError(f"not a transaction marker: {type(exc).__name__}: {exc}") from None
        marker.check_paths()
        return marker

    def check_paths(self) -> None:
        """Every path lies where this kind of path must: a staged part in staging (or a worker's, in
        incoming), a final or removed part in a data folder, a quarantined one in quarantine; all inside
        the root (a planted marker must not delete, move or overwrite anything else)."""
        for path, where in [
            *((a, "staged") for a, _ in self.adds),
            *((b, "data") for _, b in self.adds),
            *((r, "data") for r in self.removes),
            *((a, "data") for a, _ in self.moves),
            *((b, "quarantine") for _, b in self.moves),
        ]:
            try:
                check_relative(path)
            except UnsafePath as exc:
                raise MarkerError(str(exc)) from None
            top = path.split("/", 1)[0]
            ok = {
                "staged": (path.startswith(f"{STAGING_DIR}/") and path.count("/") == 2)
                or (path.startswith(f"{INCOMING_DIR}/") and path.count("/") >= 3),
                "data": top in DATA_FOLDERS and path.count("/") >= 1,
                "quarantine": path.startswith(f"{QUARANTINE_DIR}/"),
            }[where]
            if not ok:
                raise MarkerError(f"a {where} path outside its place: {path[:200]!r}")

    def paths(self) -> list[str]:
        return [
            *(p for add in self.adds for p in add),
            *self.removes,
            *(p for move in self.moves for p in move),
        ]

    def check_links(self, root: Root) -> None:
        """No path this marker touches, nor a folder on the way to it, is a symbolic link (lstat'ed,
        never followed): a legal-looking path through a planted link (`runs/task=evil` -> /elsewhere)
        would delete or move outside the root. MarkerError naming the link."""
        try:
            root.safe_all(self.paths())
        except SymlinkInRoot as exc:
            raise MarkerError(f"a path of it passes through a symbolic link: {exc.link}") from None


class MarkerError(ValueError):
    """A file in _store/txn/ that is not a marker this store wrote (damaged, or planted)."""


def read_markers(root: Root, quarantine: bool = False) -> list[Marker]:
    """Every committed transaction not yet finished (normally none; one after a crash or mid-write).
    A file there that is not a valid marker is never applied: it is skipped with a warning naming it,
    and with `quarantine` (a writer holding the lock) moved to _store/quarantine/markers/."""
    markers = []
    for info in root.listing(TXN_DIR):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json") or info.base_name.startswith("."):
            continue
        try:
            marker = Marker.from_json(read_bytes(root.fs, info.path))
            marker.check_links(root)
            markers.append(marker)
        except FileNotFoundError:
            continue  # finished between the listing and the read: its effects are in place
        except MarkerError as exc:
            _bad_marker(root, info.path, exc, quarantine)
        except OSError:
            # an object store may report a key deleted while it is read as some other failure (moto:
            # "Failed to flush response stream"): gone now means finished, as above
            if root.exists(root.rel(info.path)):
                raise
    return markers


class BadMarkerWarning(UserWarning):
    """A file in _store/txn/ that is not a valid marker was skipped (and, by a writer, quarantined)."""


def _bad_marker(root: Root, path: str, error: MarkerError, quarantine: bool) -> None:
    where = f"{QUARANTINE_DIR}/markers/{PurePosixPath(path).name}"
    moved = ""
    if quarantine:
        ensure_dir(root.fs, root.abs(f"{QUARANTINE_DIR}/markers"))
        root.fs.move(path, root.abs(where))
        moved = f"; moved to {root.abs(where)}"
    else:
        moved = "; the next command that writes moves it to quarantine"
    warnings.warn(f"convgrid: ignoring {path}: {error}{moved}", BadMarkerWarning, stacklevel=3)


@dataclass
class View:
    """What convgrid's readers must see: final parts minus those removed by a committed transaction,
    plus committed parts still in staging."""

    removed: set[str] = field(default_factory=set)
    staged: dict[str, str] = field(default_factory=dict)  # final -> staged, both relative

    @classmethod
    def of(cls, root: Root) -> View:
        view = cls()
        for marker in read_markers(root):
            view.removed.update(marker.removes)
            view.removed.update(src for src, _ in marker.moves)
            view.staged.update({final: staged for staged, final in marker.adds})
        return view

    def parts(self, root: Root, directory: str) -> list[str]:
        """Relative paths of the visible parts in `directory` (staged ones by their staged path)."""
        listed = {
            f"{directory}/{i.base_name}"
            for i in root.listing(directory)
            if i.type == pafs.FileType.File and i.base_name.startswith("part-")
        }
        pending = {
            final: staged
            for final, staged in self.staged.items()
            if final.rpartition("/")[0] == directory and final not in listed
        }
        visible = [p for p in listed if p not in self.removed]
        # sorted by part name (its time prefix): oldest first, wherever the file currently lies (string
        # operations: a flush lists each folder it writes, and a folder may hold 10^4 parts)
        return sorted([*visible, *pending.values()], key=lambda p: p.rpartition("/")[2])


class Transaction:
    """Collects adds, removes and moves; `commit` runs the protocol above. Callers hold the writer lock."""

    def __init__(self, root: Root, label: str = "append") -> None:
        self.root, self.label = root, label  # the label names it to the phase hooks
        self.marker = Marker(new_id())
        self._writes: list[Future[None]] = []
        self._staging_ready = False

    def add(self, table: pa.Table, directory: str) -> str:
        """Stage `table` as a new part of `directory`; returns its final relative path, which records the
        part's size and footer checksum (runner.store.part_names): it is encoded here, in memory."""
        data = encode_parquet(table)
        name = name_for(data.size, tail_of(memoryview(data)))
        staged, final = self._staged(name), f"{directory}/{name}"
        # parts are written and fsynced in parallel (fsync and the write release the GIL); `commit`
        # waits for all of them before the marker
        self._writes.append(_POOL.submit(write_durably, self.root.fs, self.root.abs(staged), data))
        return self._added(staged, final)

    def add_written(self, directory: str, write: Callable[[pafs.FileSystem, str], None]) -> str:
        """Stage a new part of `directory` that `write(fs, path)` writes, in this thread (a merge streams
        rows into it, so the part never stands in memory whole); returns its final relative path, named
        once written from its size and footer. If `write` raises, its partial file is deleted and nothing
        is added."""
        staged = self._staged(f"part-{new_id()}.written")
        path = self.root.abs(staged)
        try:
            write(self.root.fs, path)
            size = self.root.fs.get_file_info(path).size
            final = f"{directory}/{name_for(size, read_tail(self.root.fs, path, size))}"
        except BaseException:
            delete_quietly(self.root.fs, path)
            raise
        return self._added(staged, final)

    def adopt(self, staged: str, directory: str) -> str:
        """Add a part written (durably, its name in its folder made durable too) by another process under
        _store/incoming/ (runner.store.incoming): published into `directory` under a new name of this
        transaction's time that records the same size and footer checksum. Nothing is read or written
        here; returns its final relative path."""
        return self._added(staged, f"{directory}/{renamed(staged.rsplit('/', 1)[-1])}")

    def _staged(self, name: str) -> str:
        if not self._staging_ready:
            ensure_dir(self.root.fs, self.root.abs(STAGING_DIR))
            self._staging_ready = True
        # one flat staging folder, files prefixed by their transaction: no folder to create (and
        # fsync) per transaction, which is most of a small flush's cost
        return f"{STAGING_DIR}/{self.marker.txn}.{name}"

    def _added(self, staged: str, final: str) -> str:
        self.marker.adds.append((staged, final))
        reached("staging", self.label)
        return final

    def remove(self, rel: str) -> None:
        if rel.startswith(STAGING_DIR):
            raise ValueError(f"cannot replace {rel}: a committed part still in staging (recover first)")
        if rel not in self.marker.removes:
            self.marker.removes.append(rel)

    def quarantine(self, rel: str) -> str:
        dest = f"{QUARANTINE_DIR}/{self.marker.txn}/{rel}"
        self.marker.moves.append((rel, dest))
        return dest

    @property
    def empty(self) -> bool:
        return not (self.marker.adds or self.marker.removes or self.marker.moves)

    def commit(self) -> None:
        if self.empty:
            return
        fs = self.root.fs
        marker = f"{TXN_DIR}/{self.marker.txn}.json"
        # Locally the marker is written (and fsynced) beside the staged parts, in parallel with them;
        # its rename into txn/ is the commit point. (Uncommitted, it is one more staging leftover.)
        tmp = f"{STAGING_DIR}/{self.marker.txn}.marker"
        if is_local(fs):
            ensure_dir(fs, self.root.abs(STAGING_DIR))
            self._writes.append(_POOL.submit(write_bytes, fs, self.root.abs(tmp), self.marker.to_json()))
        for write in self._writes:
            write.result()  # a failed write raises here, before anything is committed
        self.root.safe_all(self.marker.paths())  # SymlinkInRoot: nothing is committed through a planted link
        reached("staged", self.label)
        self.root.fence()
        ensure_dir(fs, self.root.abs(TXN_DIR))
        if is_local(fs):
            fs.move(self.root.abs(tmp), self.root.abs(marker))
        else:
            body = self.marker.to_json()
            try:
                # the commit point: a put-if-absent of the next numbered commit (runner.coord.fenced_commits),
                # then the marker where readers look (an upload appears whole)
                self.root.seal(body, lambda: write_bytes(fs, self.root.abs(marker), body))
            except LockLost:
                for staged, _ in self.marker.adds:  # never committed: what only it staged goes now
                    if staged.startswith(f"{STAGING_DIR}/"):
                        delete_quietly(fs, self.root.abs(staged))
                raise
        # The staged names and the marker's are made durable together, not one fsync after the other:
        # a power cut between them can leave a durable marker whose parts have no names, which
        # `recover` rolls back (`_lost_before_publishing`); nothing is published before both are done.
        list(_POOL.map(lambda d: fsync_dir(fs, self.root.abs(d)), (STAGING_DIR, TXN_DIR)))
        reached("marked", self.label)
        try:
            apply(self.root, self.marker, self.label)
        except OSError as exc:
            # Committed: every reader already sees this transaction and the next command's `recover`
            # finishes publishing it. Raising would make the caller write the same rows again.
            warnings.warn(f"transaction {self.marker.txn} committed, publishing left to recovery: {exc}", stacklevel=2)


def apply(root: Root, marker: Marker, label: str = "recover") -> None:
    """Steps 3 to 5 of the protocol; idempotent, so recovery simply runs it again."""
    marker.check_links(root)  # read_markers checked too: a link planted since is refused, not followed
    fs = root.fs
    published: set[str | None] = set()
    if marker.adds:
        published.add(_publish(root, *marker.adds[0]))
        reached("publishing", label)
        # the others at once: a flush of workers' parts (runner.store.incoming) publishes one a run of a
        # long curve, and on an object store a move is a copy and a delete, tens of ms each
        published.update(_PUBLISHING.map(lambda add: _publish(root, *add), marker.adds[1:]))
    list(_POOL.map(lambda d: fsync_dir(fs, root.abs(d)), {d for d in published if d is not None}))
    reached("published", label)
    touched: set[str] = set()
    for src, dest in marker.moves:
        if root.exists(src):
            ensure_dir(fs, root.abs(str(PurePosixPath(dest).parent)))
            _move(root, src, dest)
            touched.add(str(PurePosixPath(src).parent))
    for i, rel in enumerate(marker.removes):
        delete_quietly(fs, root.abs(rel))
        touched.add(str(PurePosixPath(rel).parent))
        if i == 0:
            reached("deleting", label)
    for directory in touched:
        fsync_dir(fs, root.abs(directory))
    reached("deleted", label)
    # No fsync after this delete: if a crash undoes it, recovery applies the marker again, which
    # finds every add published and every remove gone, and changes nothing.
    delete_quietly(fs, root.abs(f"{TXN_DIR}/{marker.txn}.json"))


def _publish(root: Root, staged: str, final: str) -> str | None:
    """Move a staged part to its final path; returns the folder it went to (None: done before)."""
    if not root.exists(staged):
        return None
    if root.exists(final):
        delete_quietly(root.fs, root.abs(staged))  # an object store's move is copy then delete
        return None
    parent = final.rpartition("/")[0]
    ensure_dir(root.fs, root.abs(parent))
    _move(root, staged, final)
    return parent


def _move(root: Root, src: str, dest: str) -> None:
    """Move a part; a move that another process applying the same marker made first is done. (On an
    object store the writers' lock is a lease: a writer paused past it may still be publishing its
    marker while the next holder's `recover` applies it, and a move there is a copy then a delete.)"""
    try:
        root.fs.move(root.abs(src), root.abs(dest))
    except OSError:  # FileNotFoundError included: the source went between our look and our move
        if root.exists(src) or not root.exists(dest):
            raise


def _lost_before_publishing(root: Root, marker: Marker) -> bool:
    """A marker whose commit never became durable: a power cut after its rename and before the fsyncs
    of the staging and marker folders (Transaction.commit) kept the marker and lost a staged part's
    name. Its writer had not returned, and nothing of it was published (publishing starts after both
    fsyncs), so it is rolled back. A marker with one part published is applied, whatever else is gone."""
    lost = any(not root.exists(staged) and not root.exists(final) for staged, final in marker.adds)
    return lost and not any(root.exists(final) for _, final in marker.adds)


def _unsealed(root: Root) -> int:
    """On an object store, the newest commit record whose writer died before it wrote the marker
    (runner.coord.fenced_commits): committed, so its marker is written now (and applied below). A record
    whose staged parts are gone was applied and its marker deleted long ago. Returns 1 for a marker written."""
    data = root.unsealed()
    if data is None:
        return 0
    try:
        marker = Marker.from_json(data)
        marker.check_links(root)
    except MarkerError as exc:
        warnings.warn(
            f"convgrid: ignoring the newest commit record of {root.base}: {exc}", BadMarkerWarning, stacklevel=3
        )
        return 0
    # adds are published in order, the first alone first (`apply`): unpublished, it is still staged
    if not marker.adds or root.exists(f"{TXN_DIR}/{marker.txn}.json") or not root.exists(marker.adds[0][0]):
        return 0
    write_bytes(root.fs, root.abs(f"{TXN_DIR}/{marker.txn}.json"), data)
    return 1


def recover(root: Root, locked: bool) -> int:
    """Finish what dead writers left: roll committed transactions forward, uncommitted staging back,
    and delete temporary files. `locked`: the caller holds the writer lock, so no staging is live.
    Returns how many leftovers were dealt with."""
    done = _unsealed(root)
    for marker in read_markers(root, quarantine=True):  # recovery runs under the writers' lock
        if _lost_before_publishing(root, marker):
            for staged, _ in marker.adds:
                delete_quietly(root.fs, root.abs(staged))
            delete_quietly(root.fs, root.abs(f"{TXN_DIR}/{marker.txn}.json"))
        else:
            apply(root, marker)
        done += 1
    for info in root.listing(TXN_DIR):
        if info.base_name.startswith("."):  # a marker whose writer died before publishing it
            delete_quietly(root.fs, info.path)
            done += 1
    now = time.time()
    for info in root.listing(STAGING_DIR):  # staged parts of transactions that never committed
        live_maybe = not locked and not (info.mtime is not None and now - info.mtime.timestamp() > STALE_STAGING_S)
        if not live_maybe:
            delete_quietly(root.fs, info.path)
            done += 1
    return done
