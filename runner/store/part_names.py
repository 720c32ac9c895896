"""A part's name says what the part must be: its size and the CRC-32 of its footer.

    part-<20-digit time>-<12 hex>-<size in bytes>-<CRC-32 of the footer, 8 hex>.parquet

Every page of a part is written with its own checksum (verified on every read, runner.store.parts), so
a flipped byte in the data is an error naming the file. The footer has no checksum of its own, and a flip
there reads as wrong numbers with no error (a statistic that filters out every row, a column's type):
fuzzing single bytes of committed parts found 36 such silent wrong answers out of ~9,400 variants, all
in footers. So the footer's CRC-32, and the file's size (a truncated or extended part), are recorded
where nothing can separate them from the part, its name, and checked when the footer is read.
Parts named before this (`part-<time>-<hex>.parquet`) carry nothing to check and are read as before.
"""

from __future__ import annotations

import re
import struct
import time
import uuid
import zlib
from dataclasses import dataclass

PART = re.compile(r"^part-(?P<id>\d{20}-[0-9a-f]{12})(?:-(?P<size>\d+)-(?P<crc>[0-9a-f]{8}))?\.parquet$")
MAGIC = b"PAR1"


class FooterError(ValueError):
    """The bytes at the end of a file are not a Parquet footer."""


@dataclass(frozen=True)
class Expected:
    size: int
    footer_crc: int


def new_id() -> str:
    """A unique id whose time prefix sorts parts (and transactions) in the order they were made."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}"


def footer_length(last8: bytes) -> int:
    """The footer's length from a file's last 8 bytes (4-byte little-endian length, then PAR1)."""
    if len(last8) != 8 or last8[4:] != MAGIC:
        raise FooterError("the file does not end in a Parquet footer (no PAR1 magic)")
    return int(struct.unpack("<i", last8[:4])[0])


def footer_crc(footer: bytes) -> int:
    """CRC-32 of a footer as `tail` returns it: the footer, its length and the magic."""
    return zlib.crc32(footer) & 0xFFFFFFFF


def tail_of(data: bytes | memoryview) -> bytes:
    """The footer with its length and magic (what `footer_crc` covers) of a whole file's bytes."""
    length = footer_length(bytes(data[-8:]))
    if length <= 0 or length + 12 > len(data):
        raise FooterError(f"the footer length {length} does not fit a file of {len(data)} bytes")
    return bytes(data[-(length + 8) :])


def name_for(size: int, footer: bytes) -> str:
    """A new part's name for a file of `size` bytes ending in `footer` (see `tail_of`)."""
    return f"part-{new_id()}-{size}-{footer_crc(footer):08x}.parquet"


def expected(rel: str) -> Expected | None:
    """What the part at `rel` must be, by its name; None for a name that records nothing."""
    match = PART.match(rel.rsplit("/", 1)[-1])
    if match is None or match["size"] is None:
        return None
    return Expected(int(match["size"]), int(match["crc"], 16))


def renamed(name: str) -> str:
    """A new name, of this moment, for the part named `name`: the same recorded size and footer checksum
    (a worker's part published by a driver sorts by when it was committed, not by the worker's clock)."""
    match = PART.match(name)
    if match is None or match["size"] is None:
        raise ValueError(f"not a part name that records its size and footer checksum: {name[:200]!r}")
    return f"part-{new_id()}-{match['size']}-{match['crc']}.parquet"
