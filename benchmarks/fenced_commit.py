"""What fencing costs an object-store commit (issue 44): one lock-take-and-commit cycle (what a driver's
flush pays: `ResultStore.writing()` around one Transaction of one small part) on the loopback S3
server (moto), with the commit fenced (a put-if-absent of the next numbered commit record, and the
look that no later record exists; the newest record read once per lock taken) and with those steps
switched off, interleaved, in one run.

    python benchmarks/fenced_commit.py [--repeats 40]

Prints the min and median ms of each and their differences. Loopback numbers: a real object store
adds its round trip (tens of ms) to each request, of which fencing adds two per commit and two per
lock taken (a flush takes the lock once).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # tests.loopback_s3: the same loopback server the tests use

from runner import ResultStore  # noqa: E402
from runner.coord.lease_lock import LeaseLock  # noqa: E402
from runner.store.txn import Transaction  # noqa: E402
from tests.loopback_s3 import moto_bucket  # noqa: E402


def _unfenced(store: ResultStore) -> ResultStore:
    """The same store with the fencing steps switched off (what a commit cost before issue 44)."""
    assert isinstance(store.lock, LeaseLock)
    store.lock.on_acquire = store.lock.on_release = None
    store.files.seal = lambda _marker, then: then()
    store.files.unsealed = lambda: None
    return store


def _cycle(store: ResultStore, table: pa.Table) -> float:
    started = time.perf_counter()
    with store.writing():
        txn = Transaction(store.files)
        txn.add(table, "members")
        txn.commit()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    with moto_bucket("bench") as uri:
        contenders: dict[str, tuple[ResultStore, Callable[..., float]]] = {
            "fenced": (ResultStore(uri.format("fenced")), _cycle),
            "unfenced": (_unfenced(ResultStore(uri.format("unfenced"))), _cycle),
        }
        table = pa.table({"x": [1, 2, 3]})
        times: dict[str, list[float]] = {name: [] for name in contenders}
        for store, cycle in contenders.values():  # warm-up: boto3's client, the first listing
            cycle(store, table)
        for i in range(args.repeats):
            order = list(contenders) if i % 2 == 0 else list(reversed(contenders))  # interleaved
            for name in order:
                store, cycle = contenders[name]
                times[name].append(cycle(store, table))
        for name, values in times.items():
            print(f"{name:9s} min {min(values):7.2f} ms  median {statistics.median(values):7.2f} ms  (n={len(values)})")
        fenced, unfenced = times["fenced"], times["unfenced"]
        print(
            f"fencing costs a commit cycle: min {min(fenced) - min(unfenced):+.2f} ms, median "
            f"{statistics.median(fenced) - statistics.median(unfenced):+.2f} ms "
            f"(median ratio {statistics.median(fenced) / statistics.median(unfenced):.2f})"
        )


if __name__ == "__main__":
    main()
