"""An ask process's entry point (runner.tune.ask_processes): `python -m runner.tune.ask_server FD`, FD its
end of the socket pair to the driver, on which the study to serve comes first."""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from runner.tune.optuna_asks import serve_asks


def main(fd: int) -> None:
    conn = Connection(fd)
    try:
        serve_asks(conn, conn.recv())
    except (EOFError, OSError):
        pass  # the driver is gone before it sent the study
    finally:
        conn.close()


if __name__ == "__main__":
    main(int(sys.argv[1]))
