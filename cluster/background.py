"""Starting the embedded Ray without waiting for it: a thread of its own starts it (and runs a follow-up,
such as warming an actor pool) while the caller goes on; convgrid runs cells in process meanwhile
(runner.execute.warm).

The thread stays alive after Ray is up. ray.init starts Ray's head processes (GCS, raylet) with kernel
fate-sharing (Linux PR_SET_PDEATHSIG), and the kernel ties that to the *thread* that spawned them: were
the starting thread to end, they would be killed with it. So it parks until `shutdown_if_owned` has
stopped Ray, or until the process exits. A process that exits while the start is still under way takes
Ray's head with it (that same fate-sharing; Ray's exit hook stops whatever is already connected), and
the raylet's two agents, which watch the raylet, exit on their own once they notice (here: still
there 12 s after such an exit, gone 32 s after).
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

from cluster.connect import DropNoSigtermWarning, connect, on_shutdown, starting


class BackgroundStart:
    """The embedded Ray being started by a thread of its own; `ready` is set once it is up and `then`
    (run in that thread after connecting) has returned, or once either failed (`check` raises it)."""

    def __init__(self, then: Callable[[], None] | None = None, num_cpus: int | None = None) -> None:
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._then = then
        self._num_cpus = num_cpus
        self._released = threading.Event()
        # ray.init in this thread cannot restore the command line's handlers (only the main thread
        # may set them), and Ray's C++ handler takes SIGTERM first meanwhile; `check` puts them back.
        self._handlers = _main_thread_handlers()
        logging.getLogger("ray._private.worker").addFilter(DropNoSigtermWarning())
        self._thread = threading.Thread(target=self._run, name="convgrid-ray-start", daemon=True)
        starting(+1)
        self._thread.start()

    def _run(self) -> None:
        try:
            connect(None, num_cpus=self._num_cpus)
            on_shutdown(self._released.set)
            if self._then is not None:
                self._then()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread by `check`
            self.error = exc
        finally:
            starting(-1)
            self.ready.set()
        self._released.wait()  # see the module's docstring: Ray's head lives as long as this thread

    def check(self) -> None:
        """Raise what made the start fail, if it did (call once `ready` is set). Called in the main
        thread, it first puts back the signal handlers that were there when the start began."""
        if threading.current_thread() is threading.main_thread():
            handlers, self._handlers = self._handlers, {}
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
        if self.error is not None:
            raise self.error

    def wait(self) -> None:
        """Block until the start has finished; raise what made it fail."""
        self.ready.wait()
        self.check()


def _main_thread_handlers() -> dict[signal.Signals, Any]:
    """The Python handlers of SIGTERM, SIGHUP and SIGINT. They are the main thread's whichever thread
    asks (a deferred start begins in a watcher thread: runner.execute.warm)."""
    wanted = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    return {s: h for s in wanted if (h := signal.getsignal(s)) is not None}
