"""Where and with what a run was computed: host, GPU, code version, package versions.

The code version names the code that computed a run: the package's version, the git commit of the
checkout it was imported from and whether tracked files differ from that commit. Each process finds
its own once (one `git status`, none where there is no checkout), except a Ray actor that runs the
driver's very files (the embedded Ray; a node sharing the driver's filesystem): it takes the driver's,
handed over with its work (`shipped` / `adopt`), and starts no `git` at all. A worker elsewhere runs
the code installed on its node (cluster/ray-up.yaml and cluster/Dockerfile ship no .git), which may
not be the driver's: it records its own, and where that is not a git checkout it says so rather than
borrowing the driver's commit.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

_PACKAGES = ("torch", "numpy", "scipy", "pydantic", "ray", "optuna", "pyarrow")
ROOT = Path(__file__).resolve().parents[2]  # the folder holding runner/: a checkout's root, or site-packages


@dataclass(frozen=True)
class CodeVersion:
    version: str  # the installed package's version
    commit: str | None  # 12 hex digits, or None where nobody knows
    dirty: bool  # tracked files differ from the commit
    origin: str  # where the commit was read (a checkout's path, pip's record), or why it is unknown

    @property
    def label(self) -> str:
        """What a run records as `code_version`: '0.1.0+g<commit>' ('.dirty' appended when tracked files
        differ), or the version and why the commit is unknown."""
        if self.commit is None:
            return f"{self.version} (commit unknown: {self.origin})"
        return f"{self.version}+g{self.commit}{'.dirty' if self.dirty else ''}"

    def describe(self) -> str:
        """One line for people (`convgrid --version`): the string runs record, then where it comes from."""
        if self.commit is None:
            return f"convgrid {self.label}"
        changes = ", with uncommitted changes" if self.dirty else ""
        return f"convgrid {self.label} ({self.origin}{changes})"


def package_version() -> str:
    try:
        return metadata.version("convgrid")
    except metadata.PackageNotFoundError:
        return "unknown"


def read_code_version(root: Path = ROOT) -> CodeVersion:
    """The code version of the code under `root`: a checkout's commit from one `git status`; where
    `root` is no checkout (an installed package), the commit pip recorded when it installed from a git
    URL (PEP 610's direct_url.json), else none."""
    version = package_version()
    if not (root / ".git").exists():
        return CodeVersion(version, *_pip_commit())
    try:
        # One call gives both: the commit ('# branch.oid') and a line per changed tracked file.
        # --no-optional-locks: never take the index lock from under a `git` the user is running.
        out = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(root), "status", "--porcelain=v2", "--branch", "-uno"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return CodeVersion(version, None, False, f"git did not answer in {root} ({type(exc).__name__})")
    lines = out.stdout.splitlines()
    oid = next((line.split()[-1] for line in lines if line.startswith("# branch.oid ")), "")
    if oid == "(initial)":
        return CodeVersion(version, None, False, f"no commit yet in {root}")
    if out.returncode != 0 or len(oid) < 12 or not all(c in "0123456789abcdef" for c in oid):
        return CodeVersion(version, None, False, f"git status failed in {root}")
    dirty = any(not line.startswith("#") for line in lines)
    return CodeVersion(version, oid[:12], dirty, str(root))


def _pip_commit() -> tuple[str | None, bool, str]:
    with contextlib.suppress(metadata.PackageNotFoundError, ValueError, TypeError):
        text = metadata.distribution("convgrid").read_text("direct_url.json")
        record = json.loads(text) if text else {}
        commit = (record.get("vcs_info") or {}).get("commit_id")
        if commit:
            return str(commit)[:12], False, f"installed by pip from {record.get('url', 'a git URL')}"
    return None, False, "not a git checkout"


@cache
def own_code_version() -> CodeVersion:
    """This process's own code version, found once."""
    return read_code_version()


_ADOPTED: CodeVersion | None = None  # the driver's, in a worker that runs the driver's files


def current() -> CodeVersion:
    return _ADOPTED if _ADOPTED is not None else own_code_version()


def code_version() -> str:
    """What this process's runs record as `code_version`."""
    return current().label


@cache
def files_key(root: Path = ROOT) -> str:
    """Names the files this process imports the package from: the boot of this machine (a random id per
    boot, where hostnames may repeat), this process's filesystem view (its mount namespace: a container
    has its own) and the package's folder. Two processes with the same key import the same files."""
    parts = []
    for read in (
        lambda: Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        lambda: os.readlink("/proc/self/ns/mnt"),
    ):
        try:
            parts.append(read())
        except OSError:  # no /proc (macOS): the hostname stands for the machine
            parts.append(socket.gethostname())
    return "|".join([*parts, str(root)])


@dataclass(frozen=True)
class Shipped:
    """The driver's code version and the files it was read from, handed to each actor with its work."""

    code: CodeVersion
    files: str


def shipped() -> Shipped:
    return Shipped(current(), files_key())


def adopt(driver: Shipped | None) -> None:
    """In a worker: take the driver's code version when this process imports the driver's very files
    (then it is this code's version, and no `git` runs here); elsewhere this process finds its own."""
    global _ADOPTED
    _ADOPTED = driver.code if driver is not None and driver.files == files_key() else None


@cache
def packages() -> str:
    found = {"python": platform.python_version()}
    for name in _PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):  # not installed: nothing to record
            found[name] = metadata.version(name)
    return json.dumps(found, sort_keys=True)


@cache
def host() -> str:
    return socket.gethostname()


@cache
def gpu(device: str) -> tuple[str | None, float | None]:
    """(model name, total memory in GB) of a CUDA `device`, (None, None) for the CPU."""
    if not device.startswith("cuda"):
        return None, None
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    return str(props.name), round(props.total_memory / 1e9, 3)
