"""Ray clusters started by hand, as cluster/README.md tells a user to: `ray start --head` and
`ray start --address` in subprocesses, on loopback, with token authentication on.

Each node is a `ray start --block` started in a new session, so its process group holds exactly
the processes it started (GCS, raylet, workers, agents); stopping a node kills that group and
nothing else. `ray stop` is never used: it stops every Ray on the machine, other users' included.
Every file Ray writes (sessions, sockets, ray_current_cluster, the token) lives in one temporary
folder, so a plain `ray.init()` elsewhere on this machine never sees these clusters.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))

# `ray start` for a worker node, on loopback. Every node runs with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0,
# which keeps every address Ray computes at 127.0.0.1 (GCS, raylets and workers bind and dial
# loopback only). The same variable also makes `ray start --address` refuse to start a worker node
# ("multi-node clusters are not supported on Windows and OSX"), so this runs Ray's own CLI with
# that one guard lifted: the CLI module sees ENABLE_RAY_CLUSTER=True, the rest of Ray (which
# rewrites 127.0.0.1 to the machine's outward address when it is True) still sees False.
_WORKER_START = """
import sys, types
import ray._private.ray_constants as constants
from ray.scripts import scripts
scripts.ray_constants = types.SimpleNamespace(**{**vars(constants), "ENABLE_RAY_CLUSTER": True})
sys.argv = ["ray", *sys.argv[1:]]
scripts.main()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """n distinct free ports: every socket stays bound until all are chosen (one at a time, the OS may
    hand out a port just released twice, and a node whose two services share a port does not start)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]


def _ports(*extra: str) -> list[str]:
    # Explicit free ports: Ray's fixed defaults (dashboard agent 52365, 8265, ...) would collide with
    # other Rays on this machine. Worker ports 0/0: the OS picks them.
    args = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port"]
    args += ["--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port", *extra]
    out = [x for name, port in zip(args, free_ports(len(args)), strict=True) for x in (name, str(port))]
    return [*out, "--min-worker-port", "0", "--max-worker-port", "0"]


def _descendants(pid: int) -> list[int]:
    """Every live process below pid (children, their children, ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _base_env() -> dict[str, str]:
    """This process's environment without any Ray setting (tests set RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}


@dataclass
class HandCluster:
    """A head and worker nodes started with `ray start`, sharing one token file."""

    root: Path
    token_file: Path
    port: int = field(default_factory=free_port)
    nodes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # Each `ray start` writes a log of its own: a restarted head must not find its predecessor's
    # "Ray runtime started" (and a node that died on start shows why).
    logs: dict[int, Path] = field(default_factory=dict)

    @classmethod
    def create(cls) -> HandCluster:
        # A short path: Ray's Unix sockets live under it and socket paths are limited to 107 bytes.
        root = Path(tempfile.mkdtemp(prefix="cgray", dir="/tmp"))
        env = {**_base_env(), "HOME": str(root)}
        # As the docs say: `ray get-auth-token --generate` writes ~/.ray/auth_token (here under root).
        subprocess.run([RAY, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=120)
        return cls(root, root / ".ray" / "auth_token")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def node_env(self) -> dict[str, str]:
        """What a node needs: token mode on and the token file (cluster/README.md, "token")."""
        return {
            **_base_env(),
            "HOME": str(self.root),
            "RAY_TMPDIR": str(self.root),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # loopback only (see _WORKER_START)
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.token_file),
        }

    def driver_env(self, token: bool = True) -> dict[str, str]:
        """A driver's environment: only the token file; convgrid itself turns token mode on."""
        env = {
            **os.environ,
            "HOME": str(self.root / "driver-home"),  # no ~/.ray/auth_token: the token comes from the path below
            "RAY_TMPDIR": str(self.root),
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # the driver's node address stays 127.0.0.1
            "RAY_USAGE_STATS_ENABLED": "0",
        }
        env.pop("RAY_AUTH_MODE", None)
        env.pop("RAY_AUTH_TOKEN", None)
        if token:
            env["RAY_AUTH_TOKEN_PATH"] = str(self.token_file)
        else:
            env.pop("RAY_AUTH_TOKEN_PATH", None)
        return env

    def _start(self, args: list[str], head: bool, num_cpus: int = 1) -> subprocess.Popen[bytes]:
        command = [RAY] if head else [sys.executable, "-c", _WORKER_START]
        log = self.root / f"{'head' if head else 'worker'}{len(self.logs)}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [
                    *command,
                    "start",
                    "--block",
                    "--num-cpus",
                    str(num_cpus),
                    *args,
                    *_ports(*(["--dashboard-port"] if head else [])),
                ],
                env=self.node_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: see stop_node
            )
        self.nodes.append(proc)
        self.logs[proc.pid] = log
        return proc

    def start_head(self, num_cpus: int = 1) -> subprocess.Popen[bytes]:
        head = self._start(
            [
                "--head",
                "--node-ip-address",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--include-dashboard",
                "false",
                "--temp-dir",
                str(self.root / "ray"),
                "--disable-usage-stats",
            ],
            head=True,
            num_cpus=num_cpus,
        )
        self.wait_for_nodes(1, head)
        return head

    def add_worker_node(self) -> subprocess.Popen[bytes]:
        n = self.alive_nodes() + 1
        node = self._start(["--address", self.address, "--node-ip-address", "127.0.0.1"], head=False)
        self.wait_for_nodes(n, node)
        return node

    def alive_nodes(self) -> int:
        """Alive nodes as the GCS sees them, asked by a short-lived driver (which gives up on a GCS that
        does not answer after 10 tries, about 10 s, not Ray's default 20)."""
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import ray; ray.init(address={self.address!r}, logging_level='ERROR'); "
                "print(sum(n['Alive'] for n in ray.nodes()))",
            ],
            env={**self.node_env(), "RAY_gcs_server_port_wait_time_s": "10"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        return int(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else 0

    def wait_for_nodes(self, n: int, node: subprocess.Popen[bytes], timeout_s: float = 180.0) -> None:
        """Until `node`'s `ray start` says it started, then until the GCS counts n alive nodes."""
        log = self.logs[node.pid]
        deadline = time.monotonic() + timeout_s
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if node.poll() is not None:
                raise RuntimeError(f"ray start exited ({node.returncode}): {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"ray start did not finish: see {log}")
            time.sleep(0.5)
        while self.alive_nodes() < n:
            if node.poll() is not None:
                raise RuntimeError(f"ray start exited ({node.returncode}) after starting: {log.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the GCS does not count {n} alive nodes: see {log}")
            time.sleep(1.0)

    def stop_node(self, node: subprocess.Popen[bytes]) -> None:
        """SIGKILL the node's process group and every process it started (a lost machine, not a clean
        stop), then reap it. Ray's workers start their own sessions, so the group alone would miss them."""
        victims = _descendants(node.pid)
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(node.pid, signal.SIGKILL)
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.wait(timeout=60)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            self.stop_node(node)
        self.nodes.clear()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
