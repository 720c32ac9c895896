"""Every single-bit flip of committed parts, read back (`make faults`; tests/test_store_trust.py samples it).

A store of least_squares and faulty runs, a part per run; for a runs part and a curves part, each byte
flipped in turn (one bit, the lowest or the highest by position's parity), then convgrid's readers: the
content must be the pristine one, or the pristine one without that part's runs and a warning naming the
part. Anything else is a silent wrong answer. Prints one line per part and a summary:

    python -m tests.fuzz_parts [--every 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CONVGRID_LEARNERS", "faulty=tests.toy_learner")

import pyarrow.parquet as pq  # noqa: E402 - after the learners' variable

from tests.conftest import run_cell_by_cell  # noqa: E402
from tests.test_store_trust import GRID, _readers, _without  # noqa: E402


def sweep(root: Path, folder: str, every: int) -> tuple[int, int, int]:
    """(flips read the same, flips caught, silent wrong answers) over one part of `folder`."""
    expected, _ = _readers(root)
    victim = sorted((root / folder / "task=least_squares").glob("part-*.parquet"))[0]
    lost = set(pq.read_table(victim, columns=["run_id"])["run_id"].to_pylist())
    skipped = _without(expected, lost, folder)
    data = victim.read_bytes()
    same = caught = silent = 0
    for position in range(0, len(data), every):
        flipped = bytearray(data)
        flipped[position] ^= 0x01 if position % 2 else 0x80
        victim.write_bytes(bytes(flipped))
        seen, warned = _readers(root)
        if seen == expected:
            same += 1
        elif warned and seen == skipped:
            caught += 1
        else:
            silent += 1
            print(f"  silent wrong answer: byte {position} of {victim.name}", file=sys.stderr)
    victim.write_bytes(data)
    print(f"{folder}: {len(data)} bytes, {same} flips read the same, {caught} caught, {silent} silent")
    return same, caught, silent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=int, default=1, help="flip every N-th byte (default: all)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pristine = Path(tmp, "pristine")
        run_cell_by_cell(GRID, pristine)
        totals = [0, 0, 0]
        for folder in ("runs", "curves"):
            root = Path(tmp, folder)
            shutil.copytree(pristine, root)
            for i, n in enumerate(sweep(root, folder, args.every)):
                totals[i] += n
    print(f"fuzz_parts: {totals[0]} same, {totals[1]} caught, {totals[2]} silent wrong answers")
    return 1 if totals[2] else 0


if __name__ == "__main__":
    sys.exit(main())
