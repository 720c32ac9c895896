"""Parts that workers write for a driver to commit: the curve rows of finished runs, written where the
results root is, so that they never pass through the driver (issue 27; docs/store.md, "Workers write,
the driver commits").

    _store/incoming/<session>/<writer>/part-<time>-<hex>-<size>-<crc>.parquet

A driver's session (one executor's life) owns one folder, named for the driver's process
(`<time>-<hex>.<pid>.<host>.<pid table>.<start time>`, runner.coord.liveness: the host name alone does
not tell two containers' pids apart); each worker writes into a folder of its own inside it. A part is written
and made durable, with its name, before its manifest (the runs rows that name it, runner.store.records
.StagedPart) leaves the worker; the driver's flush then adds it to a transaction without reading it
(`Transaction.adopt`): publishing moves it into curves/. Until a marker names it, no reader sees it.

What no manifest will ever name is cleaned, never what one still may:
  - at the end of each `execute_cells` the driver deletes what is left in its session's folder (every
    record it was sent is committed by then: what remains was staged by a worker that died before its
    manifest arrived, or whose chunk was given up as lost);
  - every writer (`ResultStore.writing`: a flush, a merge, `compact`), under the writers' lock and
    after committed markers are applied, deletes the folders of drivers of this host whose process is
    gone, and any part older than `STALE_INCOMING_S` (a driver on another host, which one look cannot
    tell dead from slow). Staging's own rule (everything no marker names, at once) must never touch these: a
    live driver's manifests may be on their way.
A driver checks that every part it is about to commit is there with its recorded size (one stat each,
under the lock), so a part cleaned from under a driver paused past the grace period ends its command
with a message (runner.errors.StoreWriteError), its runs not done (the same command runs them again),
never a committed run without its curve, nor a run stored `failed` for what was no fault of its own.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import time
import warnings
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.fs as pafs

from runner.coord.liveness import gone_here, pid_table, start_time
from runner.fs.files import delete_quietly, fsync_dir, is_local
from runner.fs.root import Root
from runner.store.files import encode_parquet, write_durably
from runner.store.part_names import expected, name_for, new_id, tail_of
from runner.store.txn import INCOMING_DIR, QUARANTINE_DIR, reached

# A part no manifest named for this long is an orphan whoever staged it. An hour, as young staging on an
# object store (runner.store.txn.STALE_STAGING_S): far beyond a flush window plus a commit, and plus the
# store's own retries of a commit (runner.run.persist.STORE_RETRY_S, 30 s in all).
STALE_INCOMING_S = 3600.0
# How often one process sweeps by age (listing every session's parts): `recover` runs before every
# flush, and on an object store each listing is a request.
SWEEP_EVERY_S = 60.0

_HOST = re.compile(r"[^A-Za-z0-9_-]")
_last_sweep: dict[str, float] = {}
_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="convgrid-incoming")


class StagedPartLost(ValueError):
    """A staged part a manifest names is not there (or not whole): its runs cannot be committed."""


def host_tag(host: str | None = None) -> str:
    return _HOST.sub("_", host if host is not None else socket.gethostname())


def session_folder(pid: int | None = None, host: str | None = None, table: str | None = None) -> str:
    """A new session's folder for the driver process `pid` (default: this one) on `host` (default: this
    one) in process table `table` (runner.coord.liveness.pid_table; default: this one's where `host` is
    this host, none elsewhere: such a session is cleaned by age alone)."""
    pid = os.getpid() if pid is None else pid
    if table is None:
        table = pid_table() if host_tag(host) == host_tag() else ""
    start = start_time(pid) if table and table == pid_table() else ""
    return f"{INCOMING_DIR}/{new_id()}.{pid}.{host_tag(host)}.{table or 'x'}.{start or 'x'}"


def _owner(session: str) -> tuple[int, str, str] | None:
    """(pid, pid table, start time) of the driver that owns a session folder's name, or None for another
    name (a session of an older convgrid, `<time>-<hex>.<pid>.<host>`, names no process table)."""
    parts = session.split(".")
    if len(parts) != 5 or not parts[1].isdigit():
        return None
    table, start = (p if p != "x" else "" for p in parts[3:])
    return int(parts[1]), table, start


def write_staged(root: Root, folder: str, table: pa.Table) -> str:
    """Write `table` as a part in `folder` (relative), durably, its name in the folder too: a manifest
    naming it may be committed as soon as this returns. Returns its relative path."""
    data = encode_parquet(table)
    rel = f"{folder}/{name_for(data.size, tail_of(memoryview(data)))}"
    _ensure_folder(root, folder)
    write_durably(root.fs, root.abs(rel), data)
    fsync_dir(root.fs, root.abs(folder))
    reached("staged", "incoming")  # fault tests kill a worker here: staged, its manifest not yet sent
    return rel


def lost(root: Root, paths: Iterable[str]) -> list[str]:
    """The staged parts among `paths` that are not there with the size their names record."""

    def gone(rel: str) -> bool:
        info = root.fs.get_file_info(root.abs(rel))
        want = expected(rel.rsplit("/", 1)[-1])
        return info.type != pafs.FileType.File or (want is not None and info.size != want.size)

    wanted = sorted(set(paths))
    return [rel for rel, missing in zip(wanted, _POOL.map(gone, wanted), strict=True) if missing]


def discard(root: Root, folder: str) -> int:
    """Delete a session's folder and what is in it (its driver has committed all it will); returns how
    many files went. The caller holds the writers' lock, with committed markers applied first."""
    _quarantine_links(root, folder)
    found = _files(root, folder)
    for info in found:
        delete_quietly(root.fs, info.path)
    _remove_dirs(root, folder)
    return len(found)


def sweep(root: Root, now: float | None = None, grace_s: float = STALE_INCOMING_S, force: bool = False) -> int:
    """Delete what no manifest will name any more: the sessions of drivers of this process table whose
    process is gone, and parts older than `grace_s` in every other. At most every `SWEEP_EVERY_S` per root and
    process (the first call always), unless `force`. The caller holds the writers' lock, with committed
    markers applied first. Returns how many files went."""
    now = time.time() if now is None else now
    clock = time.monotonic()
    if not force and clock - _last_sweep.get(root.base, -SWEEP_EVERY_S) < SWEEP_EVERY_S:
        return 0
    _last_sweep[root.base] = clock
    done = 0
    _quarantine_links(root, INCOMING_DIR)  # before any listing: pyarrow's would follow them
    for info in root.listing(INCOMING_DIR):
        if info.type != pafs.FileType.Directory:
            continue
        session = f"{INCOMING_DIR}/{info.base_name}"
        owner = _owner(info.base_name)
        if owner is not None and gone_here(owner[1], owner[0], owner[2]):
            done += discard(root, session)
        else:
            parts = _files(root, session)
            old = [p for p in parts if p.mtime is not None and now - p.mtime.timestamp() > grace_s]
            for part in old:
                delete_quietly(root.fs, part.path)
            done += len(old)
            if len(old) == len(parts) and info.mtime is not None and now - info.mtime.timestamp() > grace_s:
                _remove_dirs(root, session)  # a worker that writes into it again makes it anew
    return done


class SymlinkQuarantined(UserWarning):
    """A symbolic link found in the store's own folder of staged parts was moved to quarantine."""


def _quarantine_links(root: Root, folder: str) -> int:
    """Locally, move every symbolic link under `folder` (the link itself, never what it points to) to
    _store/quarantine/links/, each named in a warning: a worker writes plain files and folders there,
    so a link was planted, and listing or deleting through it would reach outside the root (issue 44).
    `folder` and the folders above it must be no links (SymlinkInRoot). Returns how many moved."""
    if not is_local(root.fs):
        return 0
    top = root.safe(folder)
    moved = 0
    for parent, dirs, files in os.walk(top):  # never descends a link (followlinks=False)
        for name in [*dirs, *files]:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                continue
            target = os.readlink(path)
            dest = root.abs(f"{QUARANTINE_DIR}/links/{new_id()}-{host_tag(name)}")
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.rename(path, dest)  # rename moves the link, not what it points to
            moved += 1
            warnings.warn(
                f"convgrid: {path} is a symbolic link (to {target}) in the store's own folder {folder}: moved to "
                f"{dest}, never followed",
                SymlinkQuarantined,
                stacklevel=3,
            )
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(parent, d))]
    return moved


def _ensure_folder(root: Root, folder: str) -> None:
    """Locally, `folder` and every folder above it up to the root made, their names durable: a power cut
    must not take a committed part's folder with it (an object store has no folders)."""
    if not is_local(root.fs):
        return
    path = root.abs(folder)
    if os.path.isdir(path):
        return
    os.makedirs(path, exist_ok=True)
    rel = folder
    while "/" in rel:
        fsync_dir(root.fs, root.abs(rel))
        rel = rel.rsplit("/", 1)[0]
    fsync_dir(root.fs, root.abs(rel))
    fsync_dir(root.fs, root.base)


def _files(root: Root, folder: str) -> list[pafs.FileInfo]:
    if not root.exists(folder):
        return []
    try:
        listed = root.fs.get_file_info(pafs.FileSelector(root.abs(folder), recursive=True))
    except FileNotFoundError:
        return []
    return [i for i in listed if i.type == pafs.FileType.File]


def _remove_dirs(root: Root, folder: str) -> None:
    """Locally, the emptied folders (an object store has none)."""
    if not is_local(root.fs):
        return
    path = root.abs(folder)
    for parent, _, _ in sorted(os.walk(path), key=lambda entry: -len(entry[0])):
        # not empty: a worker presumed lost wrote into it meanwhile; the sweep takes it later
        with contextlib.suppress(OSError):
            os.rmdir(parent)
