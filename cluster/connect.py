"""Start or join Ray.

The embedded default binds to 127.0.0.1 and sends no usage statistics. Ray reads both settings when
it is imported, so nothing in convgrid imports ray at module level: this module sets the environment
first, then imports it. When joining a cluster (`--address`), the host's address is left alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

_OWNED = False  # whether this process started the Ray instance it is connected to


def _prepare_env(embedded: bool) -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if embedded:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def connect(address: str | None = None, num_cpus: int | None = None, **init_kwargs: Any) -> Any:
    """Return the `ray` module, connected. address: None (embedded local), "auto", "HOST:PORT" or
    "ray://HOST:PORT" (Ray Client). An already connected process is left as it is."""
    embedded = address is None
    _prepare_env(embedded)
    import ray

    if ray.is_initialized():
        return ray
    with _keeping_signal_handlers():
        _init(ray, embedded, address, num_cpus, init_kwargs)
    return ray


@contextlib.contextmanager
def _keeping_signal_handlers() -> Iterator[None]:
    """ray.init installs its own SIGTERM handler, which aborts the driver (exit 134) before any
    `finally` runs; the command line's handlers (flush finished runs, then exit 143) must survive it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        yield
    except SystemExit as exc:
        # A signal during ray.init met Ray's handler, which exits with the signal's number: hand it
        # to the handler that was there before (the command line's flush-and-exit), as if Ray never was.
        handler = saved.get(signal.Signals(exc.code)) if isinstance(exc.code, int) and exc.code in (15, 1) else None
        if callable(handler):
            handler(int(exc.code), None)  # type: ignore[arg-type]  # code checked to be an int above
        raise
    finally:
        for signum, handler in saved.items():
            if handler is not None:
                signal.signal(signum, handler)


def _init(ray: Any, embedded: bool, address: str | None, num_cpus: int | None, init_kwargs: dict[str, Any]) -> None:
    global _OWNED
    if embedded:
        # address="local" always starts a private instance: without it, ray.init() joins whatever
        # cluster /tmp/ray/ray_current_cluster names (another user's, or a stale one that makes it fail).
        ray.init(
            address="local",
            num_cpus=num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=True,
            configure_logging=False,
            **init_kwargs,
        )
        _OWNED = True
    else:
        if init_kwargs.get("runtime_env") is None:
            init_kwargs.pop("runtime_env", None)
        ray.init(address=address, **init_kwargs)


def shutdown_if_owned() -> None:
    """Stop the embedded Ray this process started (never a cluster it merely joined)."""
    global _OWNED
    if _OWNED:
        import ray

        ray.shutdown()
        _OWNED = False
