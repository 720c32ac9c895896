"""Reading grid and study files: YAML as a user means it, every failure a ConfigError naming the file.

PyYAML's safe loader keeps the last of two equal keys (`lr` given twice silently loses the first);
here a duplicate key is an error. Undecodable bytes and absurd nesting are errors too, not tracebacks.

What a file may cost is bounded before anything is built from it:
- its size (MAX_FILE_BYTES, 2 MiB). A 50 MB grid took 333 s and 5 GB to parse. The largest shipped
  grid or study file is 1.7 KB (a grid names its axes; its cells are their products), and a zip that
  lists 100,000 six-digit values by hand is 0.8 MB. The densest 2 MiB file (a list of 290,000 integers)
  parses in 4.4 s with a 154 MB peak on the project's 2-core machine at a load of 8; 4 MiB took 11 s
  and 290 MB, 8 MiB 31 s and 900 MB.
- what its aliases expand to (MAX_ALIAS_NODES). An alias is one node in the file and a whole copy of
  its anchor to everything that reads the value: nine aliases of nine aliases, eight levels deep,
  are 364 bytes and 43 million values (a "billion laughs"), which ran a dry-run past 160 s and
  7.8 GB. The composed document is counted, each alias as the nodes it stands for, and a file whose
  aliases add more than a million nodes (what the largest file could hold written out) is refused
  with the key under which they expand, before anything is constructed.

The parser is libyaml's where PyYAML has it (its wheels do): about 5 times faster than PyYAML's own.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from runner.errors import ConfigError

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_ALIAS_NODES = 1_000_000


# The constructor, where the checks below live, is Python with either parser.
_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_SafeLoader):
    """A safe loader that refuses a mapping with a key given twice, and aliases that expand too far."""

    def construct_document(self, node: yaml.Node) -> Any:
        _check_aliases(node)
        return super().construct_document(node)


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

# YAML 1.2's floats that YAML 1.1 (PyYAML's) reads as strings: 1e-8, 5E3, 1.e-3 (1.1 wants a dot and a
# signed exponent). Unquoted they are numbers here, so that a string where a number goes is always a
# quoted one, which grid params refuse (runner.grid.identity). add_implicit_resolver copies the class's
# table first: PyYAML's own loaders are unchanged.
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


class AliasBomb(yaml.YAMLError):
    """Aliases that expand past MAX_ALIAS_NODES (`key`: where, `nodes`: how many they add; None: an alias
    inside its own anchor, which never ends)."""

    def __init__(self, key: str, nodes: int | None, mark: yaml.Mark | None) -> None:
        super().__init__(key)
        self.key, self.nodes, self.problem_mark = key, nodes, mark


def _children(node: yaml.Node) -> list[tuple[str, yaml.Node]]:
    """(label, node) of a node's children in document order: a mapping's keys and values (a value
    labelled by its key), a sequence's items (by index)."""
    if isinstance(node, yaml.MappingNode):
        out: list[tuple[str, yaml.Node]] = []
        for key, value in node.value:
            label = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
            out += [(label, key), (label, value)]
        return out
    if isinstance(node, yaml.SequenceNode):
        return [(str(i), item) for i, item in enumerate(node.value)]
    return []


def _kids(node: yaml.Node) -> list[yaml.Node]:
    """A node's children in the order of `_children`, without their labels (the count's hot loop)."""
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else []


class _AliasCount:
    """The nodes of a composed document as its readers see them, each alias expanded. PyYAML composes an
    alias as the very node of its anchor: the first place a node is met, in document order, is where it
    is written, and every other place it is met is an alias. Only collections are followed: an alias of
    a scalar stands for one value, as many as the file has bytes for."""

    def __init__(self) -> None:
        self.expanded: dict[int, int] = {}  # id(collection) -> the nodes it stands for, aliases expanded
        self.added: dict[int, int] = {}  # id(collection) -> the nodes aliases add inside it, as written
        self.written: dict[int, tuple[int, int]] = {}  # id(collection) -> (id(parent), position) where written
        self.recursive = False  # an alias met inside its own anchor (`&a [*a]`): a value without end

    def size(self, node: yaml.Node) -> int:
        key = id(node)
        if key in self.expanded:
            return self.expanded[key]
        self.expanded[key] = -1  # being counted
        total = 1
        for child in _kids(node):
            if isinstance(child, yaml.ScalarNode):
                total += 1
            elif self.expanded.get(id(child)) == -1:
                self.recursive = True
                total += MAX_ALIAS_NODES + 1
            else:
                total += self.size(child)
        self.expanded[key] = total
        return total

    def walk(self, node: yaml.Node) -> int:
        """The nodes aliases add inside `node` (which is where it is written)."""
        added = 0
        for i, child in enumerate(_kids(node)):
            if not isinstance(child, yaml.ScalarNode):
                added += self.through(node, i, child)
        self.added[id(node)] = added
        return added

    def through(self, parent: yaml.Node, position: int, child: yaml.Node) -> int:
        """The nodes aliases add through the child at `position` of `parent`: all it stands for where it
        is an alias, else what aliases add inside it."""
        if isinstance(child, yaml.ScalarNode):
            return 0
        site = self.written.setdefault(id(child), (id(parent), position))
        if site != (id(parent), position):
            return self.size(child)
        return self.added[id(child)] if id(child) in self.added else self.walk(child)


def _check_aliases(root: yaml.Node) -> None:
    count = _AliasCount()
    total = count.walk(root)
    if total <= MAX_ALIAS_NODES:
        return
    # Name the deepest key through which they pass the bound: down through mappings (and lists of
    # mappings), ending at a list of values or at the alias itself.
    path: list[str] = []
    node = root
    while isinstance(node, yaml.MappingNode | yaml.SequenceNode):
        if isinstance(node, yaml.SequenceNode) and not any(isinstance(c, yaml.MappingNode) for c in node.value):
            break
        over = [
            (label, i, child)
            for i, (label, child) in enumerate(_children(node))
            if count.through(node, i, child) > MAX_ALIAS_NODES
        ]
        if not over:
            break
        label, i, child = over[0]
        path.append(label)
        if count.written.get(id(child)) != (id(node), i):
            break  # an alias: the place it is used is the one to name
        node = child
    raise AliasBomb(".".join(path), None if count.recursive else total, node.start_mark)


def parse_yaml(text: str, file: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except AliasBomb as exc:
        problem = (
            "an alias (*name) inside its own anchor (&name) makes a value without end"
            if exc.nodes is None
            else f"its aliases (*name) expand to {exc.nodes:,} more values than are written, more than "
            f"{MAX_ALIAS_NODES:,}; write the values out, or use fewer aliases of aliases"
        )
        raise ConfigError(problem, file=file, key=exc.key or None) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        if "nesting depth" in problem:  # libyaml's own bound (1,000 levels)
            problem = "nested too deeply"
        raise ConfigError(f"malformed YAML{where}: {problem}", file=file) from None
    except RecursionError:
        raise ConfigError("malformed YAML: nested too deeply", file=file) from None


def read_yaml(path: Path) -> Any:
    """Parse a YAML file, turning every failure into a ConfigError that names the file."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ConfigError(
                f"{size / 2**20:.1f} MiB, larger than the {MAX_FILE_BYTES // 2**20} MiB a grid or study file may be "
                "(a grid names its axes; cells are their products)",
                file=str(path),
            )
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=str(path)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"not UTF-8 text: byte {data[exc.start]:#04x} at line {line}", file=str(path)) from None
    return parse_yaml(text, str(path))
