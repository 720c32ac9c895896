"""Where and with what a run was computed: host, GPU, code version, package versions."""

from __future__ import annotations

import contextlib
import json
import platform
import socket
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path

_PACKAGES = ("torch", "numpy", "scipy", "pydantic", "ray", "optuna", "pyarrow")


@cache
def code_version() -> str:
    """convgrid's version plus the git commit (and '+dirty') when run from a checkout."""
    try:
        version = metadata.version("convgrid")
    except metadata.PackageNotFoundError:
        version = "unknown"
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit, dirty = "", ""
    return f"{version}+g{commit}{'.dirty' if dirty else ''}" if commit else version


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
