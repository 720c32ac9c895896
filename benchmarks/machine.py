"""What every benchmark prints in its header: the machine a ratio was measured on (CPU model, how many
CPUs, the load other jobs put on it, the time), since ratios move from one CPU to another."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


def header() -> str:
    """CPU model, CPU count, load average and UTC time, on one line."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"{cpu_model()}, {os.cpu_count()} CPUs, {load()}, {when}"
