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
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.fs as pafs

from runner import ResultStore
from runner.coord.lease_lock import LeaseLock
from runner.store.txn import Transaction


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        uri = f"s3://bench/{{}}?endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
        fs, _ = pafs.FileSystem.from_uri(uri.format("x") + "&allow_bucket_creation=true")
        fs.create_dir("bench")
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
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
