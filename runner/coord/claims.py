"""Several drivers, one store: drivers running the same grid on the same root split its cells.

Layout, per grid (its key: a hash of the grid's sorted run ids, so every driver of one grid agrees):

    _store/claims/<key>/drivers/<driver>.json     a live driver's heartbeat: {"beat": n, "done": blocks, ...}
    _store/claims/<key>/b<block>-g<gen>.json      generation `gen` of the claim on block `block`: its driver

Claims are coarse: the grid's cells, in the grid's order, are cut into blocks of `block_size(n)` cells (at most
~64 blocks up to 262,144 cells, blocks of 4,096 beyond: a 1M-cell grid has 245 claim files, not 1M). A block
is a range of positions in that order (`Blocks`), and the cells it yields are positions too: the driver
holds no run id, string or set per cell for the claims (a million cells' ids as Python strings and sets
were ~250 MB).
A claim is made by creating its file with the root's create-if-absent (runner.fs.exclusive): of
drivers racing for `b7-g0`, one wins. The block belongs to the newest generation's driver.

Heartbeats are cheap: one small overwrite per driver every lease/4 seconds, whatever it holds. A
driver is live while its file exists and its beat keeps changing; it is dead once an observer has
seen the same beat for `lease_s` seconds on the observer's own monotonic clock (no clock of two
machines is ever compared); on the observer's own host, a driver whose pid is gone is dead at once
(so rerunning a SIGKILLed command resumes without waiting). A driver that ends (done, Ctrl-C, an
error) deletes its file, so its blocks are free at once; a SIGKILLed one leaves it, and its blocks
are free a lease later.

A driver's heartbeat also lists the blocks it has finished (run and flushed); a block held by a live
driver and not in that list is in progress, and nobody else touches it. A block of a dead or ended
driver, or one its live driver lists as finished, is taken over by creating the next generation (create-if-
absent again: one taker wins) after asking the store which of its cells are still to run (a cell
the dead driver stored is never run again). So a grid costs its cells plus the runs a dead driver
had in flight, unflushed, when it died.

Drivers take blocks by guided self-scheduling: a share ceil(free / (4 x live drivers)) of the free
blocks at a time (one wave, claimed when the driver's executor asks for more work: runner.execute.waves),
so a lone driver makes few waves and a driver that joins later still finds work. A driver with nothing
left to claim waits while live drivers hold blocks with work, and takes them over if those drivers die:
when `run` returns, the grid is done.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow.fs as pafs

from runner.coord.liveness import DriverInfo, Heartbeat, Liveness, gone_here, identity
from runner.fs.exclusive import ExclusiveCreate
from runner.fs.files import delete_quietly, read_bytes, replace_bytes
from runner.fs.root import Root

CLAIMS_DIR = "_store/claims"
CLAIM_FILE = re.compile(r"^b(\d+)-g(\d+)\.json$")
DRIVER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,250}$")  # host-pid-hex, as `Claims.driver` makes it
UNREADABLE = "unreadable-claim"  # the owner of a claim file that is not one: never a live driver


class UnreadableClaimWarning(UserWarning):
    """A file among the claims that this code did not write was left out (its block is free a lease later)."""


def _unreadable(path: str, error: Exception) -> None:
    warnings.warn(f"convgrid: ignoring {path}: {error}", UnreadableClaimWarning, stacklevel=3)


def claim_owner(data: bytes) -> str:
    """The driver a claim file names; ValueError for anything but such a file."""
    try:
        driver = json.loads(data)["driver"]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"not a claim: {type(exc).__name__}") from None
    if not isinstance(driver, str) or not DRIVER_ID.match(driver):
        raise ValueError("not a claim: no valid driver id")
    return driver


def driver_info(data: bytes) -> DriverInfo:
    """A heartbeat file's content; ValueError for anything but such a file."""
    try:
        body = json.loads(data)
        info = DriverInfo.of(body, str(body["driver"]), int(body["beat"]), frozenset(int(b) for b in body["done"]))
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"not a heartbeat: {type(exc).__name__}") from None
    if not DRIVER_ID.match(info.driver):
        raise ValueError("not a heartbeat: no valid driver id")
    return info


def block_size(n_cells: int) -> int:
    return min(4096, max(8, math.ceil(n_cells / 64)))


@dataclass(frozen=True)
class Blocks:
    """A grid's `cells` positions cut into consecutive blocks of `size` in the grid's order (every
    driver of one grid expands it alike): a grid lists the cells that differ only in seed or step size
    side by side, so a block keeps them together and a chunk of it forms batches
    (tasks.base.BatchableTask); sorted ids would scatter them."""

    cells: int
    size: int

    @classmethod
    def of(cls, cells: int) -> Blocks:
        return cls(cells, block_size(cells))

    def __len__(self) -> int:
        return -(-self.cells // self.size)

    def span(self, block: int) -> np.ndarray:
        """The positions of the block's cells."""
        return np.arange(block * self.size, min(self.cells, (block + 1) * self.size), dtype=np.int64)

    def split(self, positions: np.ndarray, blocks: Iterable[int]) -> dict[int, np.ndarray]:
        """The given sorted positions that fall in each of `blocks`."""
        wanted = list(blocks)
        starts = np.searchsorted(positions, np.array(wanted, dtype=np.int64) * self.size)
        stops = np.searchsorted(positions, (np.array(wanted, dtype=np.int64) + 1) * self.size)
        return {b: positions[lo:hi] for b, lo, hi in zip(wanted, starts.tolist(), stops.tolist(), strict=True)}


@dataclass(frozen=True)
class Claim:
    block: int
    gen: int
    driver: str


class Claims:
    """One driver's view of the claims on one grid. `start` before claiming, `close` when done."""

    def __init__(self, files: Root, exclusive: ExclusiveCreate, key: str, lease_s: float) -> None:
        self.files, self.exclusive, self.lease_s = files, exclusive, lease_s
        self.dir = f"{CLAIMS_DIR}/{key}"
        self.driver = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.liveness = Liveness()
        self._owners: dict[str, str] = {}  # claim file -> driver (claim files never change)
        self._beat = 0
        self._done: set[int] = set()  # blocks this driver has run and flushed
        self._write_lock = threading.Lock()  # the heartbeat thread and the claiming thread both beat
        # a missed beat is one of four per lease; the next one may get through. Beats that lapse for half a
        # lease (a paused process) may have let another driver take this one's blocks: `lapsed` says so.
        self.heartbeat = Heartbeat(self._write_beat, lease_s / 4, "convgrid-heartbeat", lapse_s=lease_s / 2)
        self.complete = False  # set when `waves` found every block done: the grid's claims can go
        self.plan_stale = False  # set once the heartbeat lapsed (`lapsed`): claimed blocks are checked first

    # ---- this driver's heartbeat -----------------------------------------------------------------
    def _driver_path(self, driver: str) -> str:
        return f"{self.dir}/drivers/{driver}.json"

    def _write_beat(self) -> None:
        with self._write_lock:
            self._beat += 1
            body = {"driver": self.driver, "beat": self._beat, "host": socket.gethostname(), "pid": os.getpid()}
            body.update(identity())
            self.files.fs.create_dir(self.files.abs(f"{self.dir}/drivers"), recursive=True)
            path = self.files.abs(self._driver_path(self.driver))
            replace_bytes(
                self.files.fs, path, json.dumps({**body, "at": time.time(), "done": sorted(self._done)}).encode()
            )

    def lapsed(self) -> bool:
        """Whether this driver stood still (or could not beat) long enough since the last time this was
        asked that another may have taken over its blocks: it must check them before running more. From
        then on its plan is stale: every block it claims is checked against the store first."""
        if self.heartbeat.lapsed():
            self.plan_stale = True
            return True
        return False

    def holds(self, block: int) -> bool:
        """Whether the newest claim on `block` is still this driver's."""
        claim = self.holders().get(block)
        return claim is not None and claim.driver == self.driver

    def finished(self, blocks: Iterable[int]) -> None:
        """Say (at once, not at the next beat) that these blocks are run and flushed."""
        with self._write_lock:  # the heartbeat thread lists _done under this lock
            self._done.update(blocks)
        self._write_beat()

    def start(self) -> None:
        """Announce this driver (before its first claim, so no claim ever names an unknown driver)."""
        self._write_beat()
        self.heartbeat.start()

    def close(self) -> None:
        """End this driver: its blocks are free at once for any other driver. When it found the grid
        complete, the grid's claims folder goes too, unless another driver may still be there."""
        self.heartbeat.stop()
        delete_quietly(self.files.fs, self.files.abs(self._driver_path(self.driver)))
        if self.complete:
            remove_if_idle(self.files, self.dir)

    # ---- reading the claims ----------------------------------------------------------------------
    def drivers(self) -> dict[str, DriverInfo]:
        """The drivers with a heartbeat file, by id; a file that is not a heartbeat this code wrote (or
        whose id is not its name) is left out with a warning: its driver is as good as dead."""
        found = {}
        for info in self.files.listing(f"{self.dir}/drivers"):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
                continue
            try:
                driver = driver_info(read_bytes(self.files.fs, info.path))
            except FileNotFoundError:
                continue  # ended between listing and read
            except ValueError as exc:
                _unreadable(info.path, exc)
                continue
            if f"{driver.driver}.json" != info.base_name:
                _unreadable(info.path, ValueError(f"it names driver {driver.driver[:80]!r}"))
                continue
            found[driver.driver] = driver
        return found

    def holders(self) -> dict[int, Claim]:
        """The newest claim of every claimed block."""
        newest: dict[int, tuple[int, str]] = {}
        for info in self.files.listing(self.dir):
            match = CLAIM_FILE.match(info.base_name)
            if match is None:
                continue
            block, gen = int(match[1]), int(match[2])
            if block not in newest or gen > newest[block][0]:
                newest[block] = (gen, info.path)
        claims = {}
        for block, (gen, path) in newest.items():
            if path not in self._owners:
                try:
                    self._owners[path] = claim_owner(read_bytes(self.files.fs, path))
                except FileNotFoundError:
                    continue  # an older generation deleted by its taker: listed again next time
                except ValueError as exc:
                    # a claim nobody can own: its block is taken over as a dead driver's, by the next generation
                    _unreadable(path, exc)
                    self._owners[path] = UNREADABLE
            claims[block] = Claim(block, gen, self._owners[path])
        return claims

    def claim(self, block: int, gen: int) -> bool:
        path = f"{self.dir}/b{block:06d}-g{gen:06d}.json"
        won = self.exclusive.create(self.files.abs(path), json.dumps({"driver": self.driver}).encode())
        if won and gen > 0:  # the older generations are history nobody needs: keep one file per block
            for old in range(gen):
                delete_quietly(self.files.fs, self.files.abs(f"{self.dir}/b{block:06d}-g{old:06d}.json"))
        return won

    # ---- splitting the work ----------------------------------------------------------------------
    def waves(
        self, blocks: Blocks, todo: np.ndarray, still_todo: Callable[[np.ndarray], np.ndarray]
    ) -> Iterator[list[tuple[int, np.ndarray]] | None]:
        """Yield waves for this driver to run now, each a list of (block, the positions of its cells to
        run), until every block with work in `todo` (positions into the grid) is done by someone; None
        when every block left is held by a live driver (the caller settles its own work, so that no two
        drivers wait on each other, then waits a poll before asking again). `still_todo(positions)` asks
        the store which of them are still to run (sorted). The caller says `finished(blocks)` once a
        wave's records are committed, not before: a block listed as finished may be taken over at once."""
        todo = np.unique(np.asarray(todo, dtype=np.int64))  # sorted: each block's share is one slice
        pending = set(np.unique(todo // blocks.size).tolist()) if len(todo) else set()
        while pending:
            self.lapsed()  # a pause of this driver: the plan it was handed is no longer to be trusted
            holders = self.holders()
            infos = self.drivers()
            now = time.monotonic()
            live = {d for d in infos if d == self.driver or self.liveness.alive(infos[d], self.lease_s, now)}
            free = sorted(b for b in pending if b not in holders)
            if free:
                share = math.ceil(len(free) / (4 * max(1, len(live))))
                # Beside other live drivers, start at a driver-specific place: racing drivers mostly create
                # different files. Alone, take the blocks in the grid's order: cells that batch together
                # (tasks.base.BatchableTask) stand side by side there, and a rotated order would cut their run.
                racing = len(live) > 1
                start = int(hashlib.sha256(self.driver.encode()).hexdigest(), 16) % len(free) if racing else 0
                mine = []
                for block in free[start:] + free[:start]:
                    if self.claim(block, 0):
                        mine.append(block)
                        pending.discard(block)
                        if len(mine) >= share:
                            break
                if mine and self.plan_stale:
                    # paused past a lease: others may have run anything meanwhile (and, finding the grid
                    # done, removed its claims), so the store says what is left, not the plan
                    left = blocks.split(still_todo(np.concatenate([blocks.span(b) for b in mine])), mine)
                    nothing = [b for b in mine if not len(left[b])]
                    if nothing:
                        self.finished(nothing)
                    wave = [(b, left[b]) for b in mine if len(left[b])]
                    if wave:
                        yield wave
                elif mine:
                    yield sorted(blocks.split(todo, mine).items())
                continue
            orphans = sorted(b for b in pending if holders[b].driver not in live or b in infos[holders[b].driver].done)
            if orphans:
                left = blocks.split(still_todo(np.concatenate([blocks.span(b) for b in orphans])), orphans)
                taken = []
                for block in orphans:
                    if not len(left[block]):
                        pending.discard(block)  # its driver finished it
                    elif self.claim(block, holders[block].gen + 1):
                        taken.append((block, left[block]))
                        pending.discard(block)
                for dead in {holders[b].driver for b in orphans} & (set(infos) - live):
                    delete_quietly(self.files.fs, self.files.abs(self._driver_path(dead)))  # seen dead a lease
                if taken:
                    yield taken
                continue
            yield None  # every block left is held by a live driver: watch it finish or die
        self.complete = True

    @property
    def poll_s(self) -> float:
        """How long a driver with nothing to claim waits before looking again."""
        return min(1.0, self.lease_s / 4)


def live_claims(files: Root, lease_hint_s: float) -> list[tuple[str, DriverInfo, int, float]]:
    """For `convgrid status`: (grid key, driver, blocks held, seconds since its last beat by its clock)
    of every driver with a heartbeat file. One look cannot tell a slow driver from a dead one: the age
    says which is likely (a live one beats every lease/4)."""
    rows = []
    for info in files.listing(CLAIMS_DIR):
        if info.type != pafs.FileType.Directory:
            continue
        key = info.base_name
        view = Claims(files, _NoCreate(), key, lease_hint_s)
        held: dict[str, int] = {}
        for claim in view.holders().values():
            held[claim.driver] = held.get(claim.driver, 0) + 1
        for driver in view.drivers().values():
            rows.append((key, driver, held.get(driver.driver, 0), time.time() - driver.at))
    return rows


def remove_if_idle(files: Root, folder: str) -> bool:
    """Delete a grid's claims folder unless a driver may still use it: one whose heartbeat file is
    there, except in this process table with its process gone (runner.coord.liveness). (One look
    cannot tell a silent driver elsewhere from a dead one: its folder stays until that driver's file
    goes.) A driver that starts on the grid just as its folder goes claims its blocks anew and asks the
    store nothing first: it may rerun cells it planned before they were stored (the store keeps the
    newest attempt; the history both)."""
    for info in files.listing(f"{folder}/drivers"):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        try:
            driver = driver_info(read_bytes(files.fs, info.path))
        except (FileNotFoundError, ValueError):
            continue  # ended between listing and read (or not a heartbeat: nobody's)
        if not gone_here(driver.table, driver.pid, driver.start):
            return False
    with contextlib.suppress(FileNotFoundError):  # another driver that found the grid complete was first
        files.fs.delete_dir(files.abs(folder))
    return True


def remove_idle_claims(files: Root) -> int:
    """`convgrid compact`: remove the claims folders of grids no driver may still be using; how many."""
    folders = [i.base_name for i in files.listing(CLAIMS_DIR) if i.type == pafs.FileType.Directory]
    return sum(remove_if_idle(files, f"{CLAIMS_DIR}/{key}") for key in folders)


class _NoCreate:
    """A read-only view's stand-in for create-if-absent (status never claims)."""

    name = "none"

    def create(self, path: str, data: bytes) -> bool:
        raise RuntimeError("a read-only view of the claims does not claim")
