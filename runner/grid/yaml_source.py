"""Reading grid and study files: YAML as a user means it, every failure a ConfigError naming the file.

PyYAML's safe loader keeps the last of two equal keys (`lr` given twice silently loses the first);
here a duplicate key is an error. Undecodable bytes and absurd nesting are errors too, not tracebacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from runner.errors import ConfigError


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping with a key given twice."""


def _mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                key_node.start_mark,
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def parse_yaml(text: str, file: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"malformed YAML{where}: {problem}", file=file) from None
    except RecursionError:
        raise ConfigError("malformed YAML: nested too deeply", file=file) from None


def read_yaml(path: Path) -> Any:
    """Parse a YAML file, turning every failure into a ConfigError that names the file."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=str(path)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"not UTF-8 text: byte {data[exc.start]:#04x} at line {line}", file=str(path)) from None
    return parse_yaml(text, str(path))
