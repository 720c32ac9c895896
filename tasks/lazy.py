"""Package attributes that import their module on first use (PEP 562).

A package facade (`tasks`, `runner`, `runner.execute`) names what it offers without importing it, so
that importing a light corner of a package (the statuses, the store) never pays for torch or Ray.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` resolving each name of `exports` (name -> module) on first access."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def by_module(offers: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """`lazy_exports`'s table (name -> module) from the names each module offers, written module by module."""
    return {name: module for module, names in offers.items() for name in names}
