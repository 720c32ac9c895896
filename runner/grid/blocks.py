"""A grid file's blocks, checked and ready to expand: each a product of axes (and zipped axes) over fixed
params, repeated over seeds; any cell rebuilt from its position alone."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from pydantic import ValidationError

from runner.errors import ConfigError
from runner.grid.cells import Cell
from runner.grid.identity import ParamValueError, run_id, validate_params
from runner.grid.model import BlockSpec, params_error
from tasks import TaskIdentity, UnknownTaskError, get_spec, task_names


def _zip_groups(block: BlockSpec, file: str, index: int) -> list[list[dict[str, Any]]]:
    groups = block.zip if isinstance(block.zip, list) else ([block.zip] if block.zip else [])
    out = []
    for group in groups:
        lengths = {k: len(v) for k, v in group.items()}
        if len(set(lengths.values())) > 1:
            raise ConfigError(f"zipped axes must have equal lengths, got {lengths}", file=file, block=index, key="zip")
        n = next(iter(lengths.values()), 0)
        out.append([{k: v[i] for k, v in group.items()} for i in range(n)])
    return out


@dataclass(frozen=True)
class SeedAxis(Sequence[dict[str, Any]]):
    """The axis `repeat` adds, {"seed": start}, {"seed": start + 1}, ..., made on demand: a block
    repeated 100,000 times would otherwise hold 100,000 dicts (~20 MB) for as long as the grid lives."""

    start: int
    length: int

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.length))]
        if not -self.length <= index < self.length:
            raise IndexError(index)
        return {"seed": self.start + index % self.length}


@dataclass(frozen=True)
class Block:
    """A block whose axes are checked, ready to expand: cell `p` of the block is combination
    p // repeat of its axes (the last axis varying fastest) with seed offset p % repeat, so any cell can
    be rebuilt from its position without walking the ones before it."""

    spec: BlockSpec
    index: int
    file: str
    task: TaskIdentity
    axes: list[list[dict[str, Any]]]  # product axes, then zip groups: each a list of partial dicts
    varied: frozenset[str]  # keys the axes set (named in error messages)

    @property
    def size(self) -> int:
        return math.prod(len(a) for a in self.axes) * self.spec.repeat

    @property
    def all_axes(self) -> list[Sequence[dict[str, Any]]]:
        """The axes with `repeat` as the last (fastest) one, over the seed from the block's own seed on."""
        if self.spec.repeat == 1:
            return list(self.axes)
        return [*self.axes, SeedAxis(self.spec.params.get("seed", 0), self.spec.repeat)]  # an int: see check_block

    def raws(self) -> Iterator[dict[str, Any]]:
        """Every cell's raw params, in order."""
        for combo in itertools.product(*self.all_axes):
            raw = dict(self.spec.params)
            for part in combo:
                raw.update(part)
            yield raw

    def raw_at(self, position: int) -> dict[str, Any]:
        raw = dict(self.spec.params)
        parts = []
        for axis in reversed(self.all_axes):
            position, digit = divmod(position, len(axis))
            parts.append(axis[digit])
        for part in reversed(parts):
            raw.update(part)
        return raw

    def cell(self, raw: dict[str, Any]) -> Cell:
        """The validated cell of `raw`; a ConfigError naming file, block, key and choices if invalid."""
        try:
            params = validate_params(self.task, raw)
        except ValidationError as exc:
            varied = {k: raw[k] for k in self.varied if k in raw}
            raise params_error(exc, self.task, self.file, self.index, varied) from None
        except ParamValueError as exc:
            raise ConfigError(str(exc), file=self.file, block=self.index, key=exc.key) from None
        except (TypeError, ValueError) as exc:  # a validator's own exception
            raise ConfigError(str(exc), file=self.file, block=self.index) from None
        return Cell(run_id(self.task, params), self.task.name, params, self.index)


def check_block(block: BlockSpec, file: str, index: int) -> Block:
    """Check a block's task and axes (not yet its cells)."""
    try:
        task = get_spec(block.task)
    except UnknownTaskError:
        raise ConfigError(
            f"unknown task {block.task!r}", file=file, block=index, key="task", choices=task_names()
        ) from None
    zip_groups = _zip_groups(block, file, index)
    axis_keys = [list(block.product)] + [list(g[0]) if g else [] for g in zip_groups]
    seen: set[str] = set(block.params)
    for keys in axis_keys:
        for key in keys:
            if key in seen:
                raise ConfigError(
                    "param given more than once (params, product and zip must not overlap)",
                    file=file,
                    block=index,
                    key=key,
                )
            seen.add(key)
    if block.repeat > 1 and "seed" in seen - set(block.params):
        raise ConfigError("'repeat' varies the seed; do not also sweep it", file=file, block=index, key="seed")
    seed = block.params.get("seed", 0)
    if block.repeat > 1 and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(
            f"with 'repeat' the seed is the first of the repeated seeds and must be an integer (got {seed!r})",
            file=file,
            block=index,
            key="seed",
        )
    for key, values in block.product.items():
        if not values:
            raise ConfigError("an axis needs at least one value", file=file, block=index, key=key)
    product = [[{k: v} for v in vals] for k, vals in block.product.items()]
    varied = frozenset(seen - set(block.params))
    return Block(block, index, file, task, [*product, *zip_groups], varied)


def block_size(block: BlockSpec) -> int:
    """Cells a block asks for, counted from its axes without expanding them."""
    groups = block.zip if isinstance(block.zip, list) else ([block.zip] if block.zip else [])
    zipped = [max((len(v) for v in g.values()), default=0) for g in groups]
    return math.prod(len(v) for v in block.product.values()) * math.prod(zipped) * block.repeat
