"""Start or join Ray.

The embedded default binds to 127.0.0.1, sends no usage statistics and runs with Ray's token auth,
set explicitly (which spares every start Ray's notice about its default). Ray reads both settings when
it is imported, so nothing in convgrid imports ray at module level: this module sets the environment
first, then imports it. When joining a cluster (`--address`), the host's address is left alone.

Token authentication (Ray 2.60): a head started by `ray start` requires a token whenever one exists
on it (RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token), and every driver and
node must then send the same token with RAY_AUTH_MODE=token. Ray turns token mode on by itself only
for `ray.init()` / `address="auto"`; a driver given HOST:PORT with RAY_AUTH_MODE unset sends no
token and is refused. `connect` turns token mode on when RAY_AUTH_MODE is unset and the token was
handed to this process (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH); with ~/.ray/auth_token alone, set
RAY_AUTH_MODE=token yourself (see token_given for why).
"""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cluster.reaper import start as start_reaper
from runner.settings import settings

_OWNED = False  # whether this process started the Ray instance it is connected to
_WATCH: HeadWatch | None = None
# One connect at a time: the embedded Ray may be starting in a thread of its own (cluster.background)
# while another thread asks for it; that one must wait and join it, never start a second instance.
_CONNECTING = threading.Lock()
_ON_SHUTDOWN: list[Callable[[], None]] = []  # told once shutdown_if_owned has stopped the embedded Ray
_STARTING = 0  # starts under way in threads of their own (cluster.background): not ours to stop yet
_STARTING_LOCK = threading.Lock()

AUTH_MODE = "RAY_AUTH_MODE"
# Seconds the head may be unreachable before the driver gives up (CONVGRID_HEAD_GRACE_S, 15). Ray's own
# driver aborts (a C++ fatal exit, no Python cleanup) once the GCS has been gone for
# gcs_rpc_server_reconnect_timeout_s (60 s by default), so the watch must decide well before that.


class ClusterError(RuntimeError):
    """The Ray cluster cannot be reached or used; the message says what to do."""


def token_available() -> bool:
    """Whether Ray would find an auth token here (the places Ray 2.60 reads, in its order)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return Path(path).expanduser().is_file()
    return (Path.home() / ".ray" / "auth_token").is_file()


def token_given() -> bool:
    """Whether this process was handed a token explicitly (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH)."""
    return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"))


WORKER_NICENESS = "RAY_worker_niceness"  # read by the raylet: the niceness increment of its workers


def _prepare_env(embedded: bool) -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if embedded:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        # Ray lowers its workers' priority by 15 (worker_niceness), below every other process of the
        # user: on a busy machine the runs then get the CPU last, though a sequential loop in the
        # driver would get its fair share. Our private instance's workers run at the driver's priority.
        os.environ.setdefault(WORKER_NICENESS, "0")
        if AUTH_MODE not in os.environ and "ray._raylet" not in sys.modules:
            # With RAY_AUTH_MODE unset, Ray 2.60 turns token auth on for a new local instance and says so
            # on stderr at every start ("Token authentication is enabled for this Ray cluster. Set
            # RAY_AUTH_MODE=disabled to opt out..."), a notice that asks nothing of the user. A mode set
            # explicitly is followed without the notice (ray._private.authentication.
            # authentication_token_setup): naming the mode Ray would pick keeps auth on, token and all.
            # Ray reads the variable when ray._raylet is imported; a process that imported ray before
            # keeps Ray's own default, and its notice. A user's RAY_AUTH_MODE is left as it is.
            os.environ[AUTH_MODE] = "token"
    elif AUTH_MODE not in os.environ and token_given():
        # Read by Ray when its config is first used (the command line imports ray only after this).
        # Only a token handed to this process counts, not ~/.ray/auth_token, which any local
        # ray.init() writes: a driver in token mode on a cluster without auth has its own RPC server
        # reject the nodes' unauthenticated calls (its actors never start).
        os.environ[AUTH_MODE] = "token"


def _split(address: str) -> tuple[str, int] | None:
    """(host, port) of HOST:PORT or ray://HOST:PORT; None for "auto" or anything without a port."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _reachable(host: str, port: int, timeout_s: float = 5.0) -> OSError | None:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc


def _auth_advice() -> str:
    return (
        "the cluster requires Ray's auth token: give this driver the head's token "
        "(RAY_AUTH_TOKEN=..., or RAY_AUTH_TOKEN_PATH=FILE, or ~/.ray/auth_token; `ray get-auth-token` on the head "
        "prints it) and RAY_AUTH_MODE=token (see cluster/README.md)"
    )


def connect(
    address: str | None = None, num_cpus: int | None = None, watch_head: bool = False, **init_kwargs: Any
) -> Any:
    """Return the `ray` module, connected. address: None (embedded local), "auto", "HOST:PORT" or
    "ray://HOST:PORT" (Ray Client). An already connected process is left as it is. Joining a
    cluster that cannot be reached or refuses the token raises ClusterError. watch_head: watch the
    head's GCS port and interrupt the main thread when it has been gone for the grace period (the
    command line then exits with a message instead of Ray's fatal abort a minute later)."""
    embedded = address is None
    _prepare_env(embedded)
    import ray

    with _CONNECTING:
        if ray.is_initialized():
            return ray
        with _keeping_signal_handlers():
            _init(ray, address, num_cpus, watch_head, init_kwargs)
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


def _init(ray: Any, address: str | None, num_cpus: int | None, watch_head: bool, init_kwargs: dict[str, Any]) -> None:
    global _OWNED
    if address is None:
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
        start_reaper()  # what this Ray leaves if the driver is SIGKILLed dies with it (cluster.reaper)
        return
    if init_kwargs.get("runtime_env") is None:
        init_kwargs.pop("runtime_env", None)
    target = _split(address)
    if target is not None:
        # Ray retries an unreachable GCS for a minute and more, printing C++ warnings; say it at once.
        problem = _reachable(*target)
        if problem is not None:
            raise ClusterError(
                f"no Ray cluster answers at {address} ({problem}); start one (`ray start --head --port "
                f"{target[1]}`) or check the address, the port and the firewall"
            )
    from ray.exceptions import AuthenticationError

    try:
        _init_bounded(ray, address, init_kwargs)
    except AuthenticationError as exc:
        raise ClusterError(f"Ray at {address} refused this driver: {_auth_advice()}. Ray said: {exc.message}") from exc
    except ConnectionError as exc:
        # A head that requires a token answers a driver without one exactly like a dead one (Ray
        # retries "InvalidAuthToken" for seconds, then gives up with "Failed to connect").
        hint = "" if token_available() else f"; no auth token was found here, and if {_auth_advice()}"
        raise ClusterError(f"cannot join a Ray cluster at {address}: {exc}{hint}") from exc
    if watch_head and "://" not in address:  # Ray Client (ray://) reconnects and reports on its own
        host, port = ray.get_runtime_context().gcs_address.rsplit(":", 1)
        start_watch(host, int(port))


# ray.init warns that it installs no SIGTERM handler when called outside the main thread. That is what
# convgrid wants (the embedded start in the background, a bounded join): the command line's handlers
# (flush, then exit 143) stay the ones that answer.
_NO_SIGTERM_HANDLER = "SIGTERM handler is not set because current thread is not the main thread"


class DropNoSigtermWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_NO_SIGTERM_HANDLER)


def _init_bounded(ray: Any, address: str, init_kwargs: dict[str, Any]) -> None:
    """ray.init(address=...) within CONVGRID_CONNECT_TIMEOUT_S, in a thread of its own. Against an address
    where no GCS answers, Ray 2.60 retries for ~14 minutes (RAY_NUM_REDIS_GET_RETRIES, 20 tries of a GCS
    client that waits ~40 s), inside C++ calls that hold off a Python signal handler until they return
    (SIGTERM took 35 s to act). Waiting on an Event here keeps the main thread where signals are
    handled: SIGTERM and Ctrl-C end the command at once, and the timeout is one message. The thread left
    behind is a daemon: the command exits without it."""
    timeout = settings().connect_timeout_s
    done = threading.Event()
    failed: list[BaseException] = []

    def init() -> None:
        try:
            ray.init(address=address, **init_kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            failed.append(exc)
        finally:
            done.set()

    logging.getLogger("ray._private.worker").addFilter(DropNoSigtermWarning())
    threading.Thread(target=init, name="convgrid-ray-connect", daemon=True).start()
    if not done.wait(timeout):
        where = (
            f"RAY_ADDRESS={os.environ['RAY_ADDRESS']}"
            if address == "auto" and os.environ.get("RAY_ADDRESS")
            else "the cluster last started on this machine"
            if address == "auto"
            else address
        )
        raise ClusterError(
            f"no Ray cluster answered at {address} ({where}) within {timeout:g} s (CONVGRID_CONNECT_TIMEOUT_S); "
            "start one, or check the address, the port and the firewall"
        )
    if failed:
        raise failed[0]


class HeadWatch:
    """Probes the head's GCS port; after `grace_s` of refusals it records the loss and interrupts
    the main thread (which is blocked in ray.wait, where only a signal reaches it)."""

    def __init__(self, host: str, port: int, grace_s: float, every_s: float = 1.0, exit_after_s: float = 20.0) -> None:
        self.host, self.port, self.grace_s, self.every_s = host, port, grace_s, every_s
        self.exit_after_s = exit_after_s
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="convgrid-head-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        down_since: float | None = None
        while not self._stop.wait(self.every_s):
            problem = _reachable(self.host, self.port, timeout_s=min(self.every_s * 2, 5.0))
            if problem is None:
                down_since = None
                continue
            now = time.monotonic()
            down_since = down_since if down_since is not None else now
            if now - down_since >= self.grace_s:
                self.lost = (
                    f"lost the Ray head at {self.host}:{self.port} ({problem}, for {self.grace_s:.0f}s). "
                    "Finished runs are in the store; start a cluster again and rerun the same command "
                    "(with its --address) to resume"
                )
                _thread.interrupt_main()
                # The main thread writes what finished, then the command line prints this and exits.
                # If its clean-up waits on the dead cluster instead (a Ray call that never returns),
                # leave anyway, with the same message, before Ray's own fatal abort.
                if not self._stop.wait(self.exit_after_s):
                    print(f"convgrid: error: {self.lost}", file=sys.stderr, flush=True)
                    os._exit(3)
                return

    def stop(self) -> None:
        self._stop.set()


def start_watch(host: str, port: int) -> HeadWatch:
    global _WATCH
    if _WATCH is not None:
        _WATCH.stop()
    grace = settings().head_grace_s
    _WATCH = HeadWatch(host, port, grace)
    return _WATCH


def head_lost() -> str | None:
    """Why the joined cluster's head was given up on, or None while it answers (or nothing is watched)."""
    return _WATCH.lost if _WATCH is not None else None


def shutdown_if_owned() -> None:
    """Stop the embedded Ray this process started (never a cluster it merely joined). A start still
    under way in a thread of its own is left alone: stopping Ray while that thread creates actors would
    race it, and the process's exit stops it (cluster.background)."""
    global _OWNED, _WATCH
    if _STARTING:
        return
    if _WATCH is not None:
        _WATCH.stop()
        _WATCH = None
    if _OWNED:
        import ray

        _stop_monitor()
        ray.shutdown()
        _OWNED = False
    while _ON_SHUTDOWN:
        _ON_SHUTDOWN.pop()()


# How Ray 2.60 starts the autoscaler monitor of a head it starts: `python .../ray/autoscaler/_private/monitor.py`
MONITOR_SCRIPT = ("autoscaler", "monitor.py")


def ray_monitors() -> list[Any]:
    """The autoscaler monitor processes among this process's children (psutil.Process), found by their
    command line: an embedded Ray's head processes are children of the driver that started them."""
    import psutil

    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # gone meanwhile, or not ours to read
            line = " ".join(child.cmdline())
            if all(part in line for part in MONITOR_SCRIPT):
                found.append(child)
    return found


def _stop_monitor() -> None:
    """Kill the embedded Ray's autoscaler monitor before `ray.shutdown`. The monitor ignores the SIGTERM that
    shutdown sends each of Ray's processes in turn, so shutdown waited its full second for it before the
    SIGKILL: ~1 s of every command that started Ray (measured in docs/performance_log.md). It holds nothing
    of a single-node Ray that must be saved. Found as a child process by its command line (psutil, which
    Ray ships), no private Ray API; where its script moves, the plain shutdown stops it as before, and
    tests/test_ray_conventions.py fails saying so."""
    try:
        for monitor in ray_monitors():
            monitor.kill()
            monitor.wait(timeout=5)  # reaped here (at once but on a stalled machine); shutdown skips it then
    except Exception:  # noqa: BLE001 - only a faster stop is lost
        logging.getLogger(__name__).debug("could not stop Ray's monitor first", exc_info=True)


def starting(delta: int) -> None:
    """A start in a thread of its own begins (+1) or is through (-1)."""
    global _STARTING
    with _STARTING_LOCK:
        _STARTING += delta


def on_shutdown(hook: Callable[[], None]) -> None:
    """Call `hook` once `shutdown_if_owned` has run (a thread that started Ray may then end)."""
    _ON_SHUTDOWN.append(hook)
