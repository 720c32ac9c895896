"""Grid files: load, validate against each task's Params, expand into cells with stable run ids.

A grid file is a name and a list of blocks; each block is a product of axes (optionally with zipped
axes, varied together) over fixed params, repeated over seeds. Everything is validated before any
work starts; the first problem becomes a ConfigError that names the file, the block and the key.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, overload

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner.errors import ConfigError, did_you_mean
from runner.grid.block_ids import block_ids
from runner.grid.cells import Cell, GridFile
from runner.grid.identity import ParamValueError, discriminators, run_id, tag_value, validate_params, variants
from runner.grid.yaml_source import read_yaml
from runner.store.index_keys import run_keys
from runner.store.spill import KeySpill, matched
from tasks import TaskIdentity, UnknownTaskError, get_spec, task_names


class BlockSpec(BaseModel):
    """One product of axes. `zip` groups are varied together; groups and product axes multiply."""

    model_config = ConfigDict(extra="forbid")

    task: str
    params: dict[str, Any] = Field(default_factory=dict)
    product: dict[str, list[Any]] = Field(default_factory=dict)
    zip: dict[str, list[Any]] | list[dict[str, list[Any]]] | None = None
    repeat: int = Field(1, ge=1, le=100_000)


class GridSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    description: str = ""
    blocks: list[BlockSpec] = Field(min_length=1)


def read_source(source: str | Path | Mapping[str, Any], kind: str, name: str | None = None) -> tuple[str, Any, str]:
    """(file label, parsed content, default name) of a YAML path or an already-parsed mapping."""
    if isinstance(source, Mapping):
        return f"<{kind}>", dict(source), name or kind
    path = Path(source)
    return str(path), read_yaml(path), name or path.stem


def structure_error(exc: ValidationError, model: type[BaseModel], file: str) -> ConfigError:
    """The first pydantic error of a grid/study file's structure (not of task params)."""
    errors = exc.errors()
    # A misspelt key shows up twice (the required key missing, the typo extra): name the typo.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = list(err["loc"])
    block = None
    if len(loc) >= 2 and loc[0] == "blocks" and isinstance(loc[1], int):
        block, loc, model = loc[1], loc[2:], BlockSpec
    key = ".".join(str(p) for p in loc) or None
    message = err["msg"]
    choices = None
    if err["type"] == "extra_forbidden":
        choices = list(model.model_fields)
        message = "unknown key" + did_you_mean(str(loc[-1]), choices)
    return ConfigError(message, file=file, block=block, key=key, choices=choices)


def tagged_variants(task: TaskIdentity) -> dict[str, type[BaseModel]]:
    """Tag value -> model for a discriminated-union task ({} for a single model)."""
    tags = discriminators(task)
    if not tags:
        return {}
    tag = sorted(tags)[0]
    return {tag_value(m, tag): m for m in variants(task)}


def params_error(
    exc: ValidationError, task: TaskIdentity, file: str, block: int | None, cell: Mapping[str, Any]
) -> ConfigError:
    """Turn the first pydantic error of a task's params into a message with the valid choices."""
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    models = tagged_variants(task)
    # In a discriminated union pydantic puts the tag first: ('bcgd', 'lr'). Drop it, remember the branch.
    branch = None
    if len(loc) > 1 and loc[0] in models:
        branch = loc[0]
        loc = loc[1:]
    key = loc[-1] if loc else None
    choices: list[str] | None = None
    message = err["msg"]
    if err["type"] == "extra_forbidden":
        model = models[branch] if branch is not None else variants(task)[0]
        choices = sorted(model.model_fields)
        message = f"{task.name} does not take this param"
        if branch is not None:
            message += f" when {'/'.join(sorted(discriminators(task)))} is {branch!r}"
        message += did_you_mean(str(key), choices)
    elif err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        key = "/".join(sorted(discriminators(task)))
        choices = sorted(models)
        tag = err.get("ctx", {}).get("tag")
        message = f"unknown variant {tag!r}" if tag is not None else "missing variant tag"
    elif err["type"] == "literal_error":
        choices = [c.strip(" '") for c in str(err.get("ctx", {}).get("expected", "")).replace(" or ", ",").split(",")]
    if err["type"] not in ("extra_forbidden", "union_tag_not_found", "union_tag_invalid") and "input" in err:
        message += f" (got {err['input']!r})"
    varied = {k: v for k, v in cell.items() if k != "seed"}
    if varied:
        message += f"; in the cell with {varied}"
    return ConfigError(message, file=file, block=block, key=key, choices=choices)


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


def expand_block(block: BlockSpec, file: str, index: int) -> list[Cell]:
    checked = check_block(block, file, index)
    return [checked.cell(raw) for raw in checked.raws()]


MAX_CELLS_ENV = "CONVGRID_MAX_CELLS"
DEFAULT_MAX_CELLS = 10_000_000


def max_cells_default() -> int:
    return int(os.environ.get(MAX_CELLS_ENV, DEFAULT_MAX_CELLS))


def block_size(block: BlockSpec) -> int:
    """Cells a block asks for, counted from its axes without expanding them."""
    groups = block.zip if isinstance(block.zip, list) else ([block.zip] if block.zip else [])
    zipped = [max((len(v) for v in g.values()), default=0) for g in groups]
    return math.prod(len(v) for v in block.product.values()) * math.prod(zipped) * block.repeat


def load_grid(
    source: str | Path | Mapping[str, Any], name: str | None = None, max_cells: int | None = None
) -> GridFile:
    """Load and fully validate a grid from a YAML path or an already-parsed mapping. A grid of more than
    `max_cells` cells (default CONVGRID_MAX_CELLS or 10^7) is refused before anything is expanded.

    Validation streams: each cell is validated and hashed, and only its run id is kept (32 bytes), so
    the driver's memory does not grow with a cell's params; `GridFile.cells_at` rebuilds cells."""
    file, raw, default_name = read_source(source, "grid", name)
    if not isinstance(raw, dict):
        raise ConfigError(
            "a grid file must be a mapping with a 'blocks' list", file=file, choices=list(GridSpec.model_fields)
        )
    try:
        spec = GridSpec.model_validate(raw)
    except ValidationError as exc:
        raise structure_error(exc, GridSpec, file) from None
    limit = max_cells if max_cells is not None else max_cells_default()
    sizes = [block_size(b) for b in spec.blocks]
    if sum(sizes) > limit:
        raise ConfigError(
            f"the grid has {sum(sizes):,} cells (blocks: {', '.join(f'{s:,}' for s in sizes)}), more than the limit "
            f"of {limit:,}; raise it with --max-cells N or {MAX_CELLS_ENV}=N",
            file=file,
            key="blocks",
        )
    blocks = [check_block(b, file, i) for i, b in enumerate(spec.blocks)]
    every = GridFile(spec.name or default_name, file, spec.description, blocks, [block_ids(b) for b in blocks])
    return dataclasses.replace(every, dropped=_repeated(every))


def _repeated(grid: GridFile) -> np.ndarray:
    """Sorted positions of the cells that ask for a run an earlier cell asks for (two blocks may), found
    range of keys by range (runner.store.spill), so a million-cell grid never holds its keys at once."""
    with KeySpill({"position": np.int64}) as spill:
        start = 0
        for ids in grid.id_chunks():
            spill.add(run_keys(ids), position=np.arange(start, start + len(ids), dtype=np.int64))
            start += len(ids)
        repeated = [np.empty(0, dtype=np.int64)]
        for (rows,) in matched(spill):
            order = np.argsort(rows["key"], kind="stable")  # a range's positions ascend: equal keys, first cell first
            keys = rows["key"][order]
            repeated.append(rows["position"][order[1:][keys[1:] == keys[:-1]]])
    return np.sort(np.concatenate(repeated))
