"""Where runs' checkpoints live (issue 42): under the results root, through the store's filesystem layer.

    _store/checkpoints/<task>/runs/<run_id>/<step>-<sha256>.ckpt           a run not yet committed
    _store/checkpoints/<task>/final/<lineage>/<budget>-<step>-<run_id>-<sha256>.ckpt  a run's final state

A run's own checkpoints (runs/) are kept until the run is committed: the driver deletes them after each
commit (`discard_committed`), `compact` deletes those a killed driver left. Only the newest two are
kept while it runs, so that a damaged newest one falls back to the one before. Final states (final/)
are kept where the learner's budget can grow (tasks.base.Checkpointable.growable_budget): `<lineage>`
names the run's config without its budget (`lineage_key`), `<budget>` the value of its budget param and
`<step>` the learner's step it ended at (a learner's steps need not count its budget: hierarchical's count
every epoch, its budget the final phase's), so a run of the same lineage with a larger budget starts from
the final state of the largest budget up to its own.

A file holds a checkpoint's bytes (what runner.execute.checkpointing encodes: `torch.save` of a dict of
tensors and plain data, no object of any class; this module knows bytes only), named with their
SHA-256. It is written under a temporary name and renamed (a plain upload on an object store, where an
object appears whole), without an fsync (`_write`), and handed to the caller's decoder
(`torch.load(weights_only=True)`, which executes no code) only after its checksum matches. A file
that does not pass (damaged, planted, truncated, of another shape) is skipped with a warning naming
it, and the next older one is tried, else the run starts from step 0. (`lineage_key` is runner.grid.identity's.)
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pyarrow.fs as pafs

from runner.fs.files import delete_quietly, ensure_dir, is_local, read_bytes
from runner.fs.root import Root

T = TypeVar("T")
# What a file's bytes become once their checksum matched: (bytes, the step its name says) -> the checkpoint,
# or ValueError where they are not one (the caller's format: runner.execute.checkpointing, which knows torch)
Decode = Callable[[bytes, int], T]

CHECKPOINTS_DIR = "_store/checkpoints"
RUNS_SUB, FINAL_SUB = "runs", "final"
SUFFIX = ".ckpt"
KEEP_PER_RUN = 2  # the newest and the one before it (a damaged newest falls back to it)
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_RUN_FILE = re.compile(r"^(\d{12})-([0-9a-f]{64})\.ckpt$")
_FINAL_FILE = re.compile(r"^(\d{12})-(\d{12})-([A-Za-z0-9_.-]{1,200})-([0-9a-f]{64})\.ckpt$")


class CheckpointSkipped(UserWarning):
    """A checkpoint file that could not be used (its name is in the message); an older one, or step 0, is used."""


@dataclass(frozen=True)
class Held:
    """One checkpoint file: of a run not yet committed (`run_id`), or a final state (`lineage`)."""

    rel: str
    task: str
    step: int
    size: int
    run_id: str
    lineage: str | None = None


def _safe(name: str, what: str) -> str:
    if not _NAME.match(name) or name in (".", ".."):
        raise ValueError(f"not a plain {what} name for a checkpoint path: {name[:200]!r}")
    return name


class CheckpointStore:
    """The checkpoints under one results root (see the module docstring)."""

    def __init__(self, root: Root) -> None:
        self.root = root

    def _run_dir(self, task: str, run_id: str) -> str:
        return f"{CHECKPOINTS_DIR}/{_safe(task, 'task')}/{RUNS_SUB}/{_safe(run_id, 'run id')}"

    def _final_dir(self, task: str, lineage: str) -> str:
        return f"{CHECKPOINTS_DIR}/{_safe(task, 'task')}/{FINAL_SUB}/{_safe(lineage, 'lineage')}"

    def holds(self, task: str) -> bool:
        """Whether the task has a checkpoint folder at all (one look)."""
        return self.root.exists(f"{CHECKPOINTS_DIR}/{_safe(task, 'task')}")

    def _write(self, folder: str, name: str, data: bytes) -> str:
        """Write a file whole or not at all: locally under a temporary name, then renamed; on an object
        store one upload. Not fsynced: a process killed after the rename leaves the file whole (the page
        cache outlives it), and what a machine's crash leaves half-written fails its checksum and is
        skipped; an fsync per save cost 20-100 ms on this project's shared disk, 2 % of a 12 s run."""
        ensure_dir(self.root.fs, self.root.abs(folder))
        rel = f"{folder}/{name}"
        path = self.root.abs(rel)
        if not is_local(self.root.fs):
            with self.root.fs.open_output_stream(path) as out:
                out.write(data)
            return rel
        tmp = f"{path}.tmp"
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
        return rel

    def save(self, task: str, run_id: str, step: int, data: bytes) -> str:
        """Save a run's checkpoint after `step` (its encoded bytes); drop its older ones but the one before.
        Returns the file's path."""
        folder = self._run_dir(task, run_id)
        rel = self._write(folder, f"{step:012d}-{hashlib.sha256(data).hexdigest()}{SUFFIX}", data)
        for old in sorted(self._files(folder, _RUN_FILE), reverse=True)[KEEP_PER_RUN:]:
            delete_quietly(self.root.fs, self.root.abs(f"{folder}/{old[1]}"))
        return rel

    def save_final(self, task: str, lineage: str, run_id: str, budget: int, step: int, data: bytes) -> str:
        """Save a run's final state (its last `step`, at `budget`), for runs of its lineage with a larger
        budget to start from."""
        digest = hashlib.sha256(data).hexdigest()
        name = f"{budget:012d}-{step:012d}-{_safe(run_id, 'run id')}-{digest}{SUFFIX}"
        return self._write(self._final_dir(task, lineage), name, data)

    def _files(self, folder: str, pattern: re.Pattern[str]) -> list[tuple[int, str]]:
        """(step, file name) of the checkpoint files in `folder` (temporaries and strangers ignored)."""
        out = []
        for info in self.root.listing(folder):
            name = info.base_name
            match = pattern.match(name)
            if info.type == pafs.FileType.File and match:
                out.append((int(match.group(1)), name))
        return out

    def _load(self, rel: str, step: int, digest: str, decode: Decode[T]) -> T | None:
        try:
            data = read_bytes(self.root.fs, self.root.abs(rel))
            if hashlib.sha256(data).hexdigest() != digest:
                raise ValueError("its checksum does not match its contents")
            return decode(data, step)
        except (OSError, ValueError) as exc:
            warnings.warn(f"convgrid: skipped checkpoint {rel}: {exc}", CheckpointSkipped, stacklevel=3)
            return None

    def steps(self, task: str, run_id: str) -> list[int]:
        """The steps of a run's own checkpoints (from their names: nothing is read)."""
        return [step for step, _ in self._files(self._run_dir(task, run_id), _RUN_FILE)]

    def latest(self, task: str, run_id: str, decode: Decode[T]) -> T | None:
        """The run's newest checkpoint that passes its checks (`decode` the last), or None."""
        folder = self._run_dir(task, run_id)
        for step, name in sorted(self._files(folder, _RUN_FILE), reverse=True):
            ckpt = self._load(f"{folder}/{name}", step, name[13:77], decode)
            if ckpt is not None:
                return ckpt
        return None

    def finals(self, task: str, lineage: str) -> list[tuple[int, int, str, str]]:
        """(budget, step, run id, file name) of the lineage's final states, largest budget first."""
        out = []
        for _, name in self._files(self._final_dir(task, lineage), _FINAL_FILE):
            match = _FINAL_FILE.match(name)
            assert match is not None
            out.append((int(match.group(1)), int(match.group(2)), match.group(3), name))
        return sorted(out, reverse=True)

    def grow_source(self, task: str, lineage: str, budget: int, decode: Decode[T]) -> tuple[T, str] | None:
        """The final state of the largest budget up to `budget` of a run of this lineage that passes its
        checks, with that run's id; None where there is none."""
        folder = self._final_dir(task, lineage)
        for stored, step, run_id, name in self.finals(task, lineage):
            if stored <= budget:
                ckpt = self._load(f"{folder}/{name}", step, name[-69:-5], decode)
                if ckpt is not None:
                    return ckpt, run_id
        return None

    def held(self) -> Iterator[Held]:
        """Every checkpoint file under the root."""
        for task_info in self.root.listing(CHECKPOINTS_DIR):
            task = task_info.base_name
            for sub, pattern in ((RUNS_SUB, _RUN_FILE), (FINAL_SUB, _FINAL_FILE)):
                for key_info in self.root.listing(f"{CHECKPOINTS_DIR}/{task}/{sub}"):
                    folder = f"{CHECKPOINTS_DIR}/{task}/{sub}/{key_info.base_name}"
                    for info in self.root.listing(folder):
                        match = pattern.match(info.base_name)
                        if not match or info.type != pafs.FileType.File:
                            continue
                        rel, size = f"{folder}/{info.base_name}", info.size or 0
                        if sub == RUNS_SUB:
                            yield Held(rel, task, int(match.group(1)), size, key_info.base_name)
                        else:  # <budget>-<step>-<run_id>-<sha256>
                            yield Held(rel, task, int(match.group(2)), size, match.group(3), key_info.base_name)

    def uncommitted_runs(self, task: str) -> list[str]:
        """Run ids with a folder of checkpoints (one listing)."""
        return [i.base_name for i in self.root.listing(f"{CHECKPOINTS_DIR}/{_safe(task, 'task')}/{RUNS_SUB}")]

    def discard(self, task: str, run_ids: Iterable[str]) -> int:
        """Delete the checkpoints of these runs (committed: no longer needed); how many folders went."""
        gone = 0
        for run_id in run_ids:
            folder = self.root.abs(self._run_dir(task, run_id))
            try:
                self.root.fs.delete_dir(folder)
                gone += 1
            except FileNotFoundError:
                continue
            except OSError as exc:
                if "not found" not in str(exc).lower() and "no such" not in str(exc).lower():
                    raise
        return gone

    def discard_committed(self, committed: dict[str, set[str]]) -> int:
        """After a commit: delete the checkpoints of the committed runs (task -> run ids), one listing
        per task and a delete only for runs that have a folder."""
        gone = 0
        for task, run_ids in committed.items():
            gone += self.discard(task, run_ids.intersection(self.uncommitted_runs(task)))
        return gone
