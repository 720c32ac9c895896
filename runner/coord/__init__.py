"""Coordination of drivers on one results root, apart from the data: who may write (the writers'
lock: an flock locally, a queue of leases on S3) and who runs which cells of a shared grid (claims),
both kept alive by one heartbeat and judged by one liveness rule (`liveness.py`). Built on the root's
files and its create-if-absent (runner.fs); knows nothing of Parquet or runs.

    liveness.py    DriverInfo, Liveness (a beat unchanged for a lease on the observer's own clock), Heartbeat
    flock.py       WriterLock: an flock on _store/lock (local roots)
    lease_lock.py  LeaseLock: one writer at a time on S3, a queue of leases
    claims.py      Claims: drivers of one grid split its cells in blocks, take over a dead driver's
    writers.py     the writers' lock of a root (which of the two)
"""
