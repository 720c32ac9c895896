"""Grid files: load, validate against each task's Params, expand into cells with stable run ids.

A grid file is a name and a list of blocks; each block is a product of axes (optionally with zipped
axes, varied together) over fixed params, repeated over seeds. Everything is validated before any
work starts; the first problem becomes a ConfigError that names the file, the block and the key.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner.errors import ConfigError, did_you_mean
from runner.grid.identity import ParamValueError, discriminators, run_id, tag_value, validate_params, variants
from runner.grid.yaml_source import read_yaml
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


@dataclass(frozen=True)
class Cell:
    """One run a grid asks for."""

    run_id: str
    task: str
    params: BaseModel
    block: int

    def params_json(self) -> dict[str, Any]:
        return self.params.model_dump(mode="json")


@dataclass(frozen=True)
class Grid:
    name: str
    source: str
    description: str
    cells: list[Cell]  # unique by run_id, in file order

    def tasks(self) -> list[str]:
        return sorted({c.task for c in self.cells})


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


def expand_block(block: BlockSpec, file: str, index: int) -> list[Cell]:
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
    for key, values in block.product.items():
        if not values:
            raise ConfigError("an axis needs at least one value", file=file, block=index, key=key)
    product = [[{k: v} for v in vals] for k, vals in block.product.items()]
    base_seed = int(block.params.get("seed", 0)) if block.repeat > 1 else None
    cells: list[Cell] = []
    for combo in itertools.product(*product, *zip_groups):
        raw = dict(block.params)
        for part in combo:
            raw.update(part)
        for r in range(block.repeat):
            if base_seed is not None:
                raw["seed"] = base_seed + r
            try:
                params = validate_params(task, raw)
            except ValidationError as exc:
                raise params_error(
                    exc, task, file, index, {k: raw[k] for k in seen - set(block.params) if k in raw}
                ) from None
            except ParamValueError as exc:
                raise ConfigError(str(exc), file=file, block=index, key=exc.key) from None
            except (TypeError, ValueError) as exc:  # a validator's own exception
                raise ConfigError(str(exc), file=file, block=index) from None
            cells.append(Cell(run_id(task, params), task.name, params, index))
    return cells


MAX_CELLS_ENV = "CONVGRID_MAX_CELLS"
DEFAULT_MAX_CELLS = 10_000_000


def max_cells_default() -> int:
    return int(os.environ.get(MAX_CELLS_ENV, DEFAULT_MAX_CELLS))


def block_size(block: BlockSpec) -> int:
    """Cells a block asks for, counted from its axes without expanding them."""
    groups = block.zip if isinstance(block.zip, list) else ([block.zip] if block.zip else [])
    zipped = [max((len(v) for v in g.values()), default=0) for g in groups]
    return math.prod(len(v) for v in block.product.values()) * math.prod(zipped) * block.repeat


def load_grid(source: str | Path | Mapping[str, Any], name: str | None = None, max_cells: int | None = None) -> Grid:
    """Load and fully validate a grid from a YAML path or an already-parsed mapping. A grid of more than
    `max_cells` cells (default CONVGRID_MAX_CELLS or 10^7) is refused before anything is expanded."""
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
    cells: dict[str, Cell] = {}
    for index, block in enumerate(spec.blocks):
        for cell in expand_block(block, file, index):
            cells.setdefault(cell.run_id, cell)  # two blocks asking for the same run share it
    return Grid(name=spec.name or default_name, source=file, description=spec.description, cells=list(cells.values()))
