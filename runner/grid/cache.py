"""Run ids of validated blocks, cached on disk: a re-submitted or dry-run grid whose blocks were seen
before skips validating and hashing their cells (the cost of a large grid: tens of microseconds a cell).
Also a task's Arrow schemas, so that a driver whose runs execute on Ray writes their records without
importing the learner's numerical code (torch) itself; keyed by every source file of the learner.

A block's entry is keyed by its content (task, params, axes, repeat) and by a fingerprint of the code
that decides validity and ids (the task's name, version and params modules, the identity and grid
modules, pydantic's version): the same block under the same code has the same cells, all valid, so
the cached ids are exactly what expansion would give. Only fully valid blocks are stored, so an
invalid cell is refused every time. The cache is an optimisation: a missing, unreadable or unwritable
entry means expanding as usual. Folder: CONVGRID_CACHE (or "off"), else $XDG_CACHE_HOME/convgrid/blocks.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pydantic

from runner.grid.identity import canonical_json, variants
from runner.settings import settings
from tasks.base import TaskIdentity

_CODE = (
    "tasks.base",
    "runner.grid.identity",
    "runner.grid.product_ids",
    "runner.grid.spec",
    "runner.grid.block_ids",
    "runner.grid.cache",
)


def cache_dir() -> Path | None:
    value = settings().cache
    if value == "off":
        return None
    if value:
        return Path(value)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "convgrid" / "blocks"


@cache
def code_fingerprint(task: TaskIdentity) -> str:
    digest = hashlib.sha256(f"{pydantic.VERSION}|{task.name}|{task.version}".encode())
    for name in sorted({m.__module__ for m in variants(task)} | set(_CODE)):
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if path is None:
            return ""  # code we cannot read cannot be fingerprinted: no caching for this task
        digest.update(name.encode() + b"\0" + Path(path).read_bytes())
    return digest.hexdigest()


def entry(task: TaskIdentity, block: object) -> Path | None:
    """The cache file of a block (its spec as a JSON-able dict), or None where it cannot be keyed."""
    folder, code = cache_dir(), code_fingerprint(task)
    if folder is None or not code:
        return None
    try:
        text = canonical_json({"block": block, "code": code})
    except (TypeError, ValueError):  # a value JSON cannot hold (NaN, a date): expand as usual
        return None
    return folder / f"{hashlib.sha256(text.encode()).hexdigest()}.npy"


_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
ID = np.dtype("S32")


def entry_offset(path: Path | None, rows: int) -> int | None:
    """Where the ids start in a block's entry that holds exactly `rows` run ids (an .npy file of dtype
    S32), else None (no entry, or one cut short or of another shape: it is computed again)."""
    if path is None:
        return None
    try:
        with path.open("rb") as file:
            read_header = _HEADERS.get(np.lib.format.read_magic(file))
            if read_header is None:
                return None
            shape, fortran, dtype = read_header(file)
            offset = file.tell()
            size = os.fstat(file.fileno()).st_size
            if dtype != ID or shape != (rows,) or fortran or size != offset + ID.itemsize * rows:
                return None
            return offset
    except (OSError, ValueError):
        return None


def read_ids(path: Path, offset: int, start: int, stop: int) -> np.ndarray | None:
    """Ids `start:stop` of an entry whose ids begin at `offset`; None if they cannot all be read."""
    out = np.empty(stop - start, dtype=ID)
    try:
        with path.open("rb") as file:
            file.seek(offset + ID.itemsize * start)
            return out if file.readinto(out.view(np.uint8).data) == out.nbytes else None
    except OSError:
        return None


def write_ids(path: Path | None, rows: int, chunks: Iterable[np.ndarray]) -> int | None:
    """Write a block's ids into its entry as they are computed, never all in memory; returns where they
    start, or None where the entry cannot be written (no cache folder, or an OSError: the caller then
    computes them again and holds them). The entry is published (atomically) only once all `rows` are
    written; an exception from `chunks` (an invalid cell) removes the partial file and propagates."""
    if path is None:
        return None
    temp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    header = {"descr": np.lib.format.dtype_to_descr(ID), "fortran_order": False, "shape": (rows,)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with temp.open("wb") as file:
            np.lib.format.write_array_header_1_0(file, header)
            offset, written = file.tell(), 0
            for chunk in chunks:
                file.write(np.ascontiguousarray(chunk, dtype=ID).tobytes())
                written += len(chunk)
        if written != rows:
            raise ValueError(f"a block of {rows} cells gave {written} ids")
        os.replace(temp, path)  # atomic: a reader sees the whole entry or none
        return offset
    except OSError:
        return None
    finally:
        temp.unlink(missing_ok=True)


def _write(path: Path, write: Callable[[Path], object]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
        write(temp)
        os.replace(temp, path)  # atomic: a reader sees the whole entry or none
    except OSError:
        return


_SCHEMA_CODE = ("tasks/base.py", "runner/grid/schema.py", "runner/store/columns.py")
_REPO = Path(__file__).resolve().parent.parent.parent


def schemas_entry(package: str) -> Path | None:
    """The cache file of a learner's schemas: keyed by every .py file of its package and the modules
    that turn declarations into schemas (None where the package's files cannot be found)."""
    folder = cache_dir()
    found = importlib.util.find_spec(f"{package}.task")
    if folder is None or found is None or found.origin is None:
        return None
    digest = hashlib.sha256(f"{pa.__version__}|{package}".encode())
    files = sorted(Path(found.origin).parent.rglob("*.py")) + [_REPO / f for f in _SCHEMA_CODE]
    for path in files:
        digest.update(str(path).encode() + b"\0" + path.read_bytes())
    return folder / f"schemas-{digest.hexdigest()}.arrow"


def load_schemas(path: Path | None) -> tuple[pa.Schema, pa.Schema] | None:
    if path is None:
        return None
    try:
        data = path.read_bytes()
        size = int.from_bytes(data[:8], "little")
        return pa.ipc.read_schema(pa.py_buffer(data[8 : 8 + size])), pa.ipc.read_schema(pa.py_buffer(data[8 + size :]))
    except (OSError, ValueError, pa.ArrowException):
        return None


def store_schemas(path: Path | None, schemas: tuple[pa.Schema, pa.Schema]) -> None:
    if path is None:
        return
    runs, curves = (s.serialize().to_pybytes() for s in schemas)
    _write(path, lambda temp: temp.write_bytes(len(runs).to_bytes(8, "little") + runs + curves))
