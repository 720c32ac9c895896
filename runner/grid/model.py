"""The grid file's model (pydantic: blocks of axes over fixed params) and the messages its errors become:
one ConfigError naming the file, the block, the key and the valid choices."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from runner.errors import ConfigError, did_you_mean, shown
from runner.grid.identity import discriminators, tag_value, variants
from runner.grid.yaml_source import read_yaml
from tasks import TaskIdentity


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
    # seconds between a run's checkpoints (runner.execute.checkpointing); --checkpoint-every overrides it
    checkpoint_every: float | None = Field(None, ge=0.0)


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
        message += f" (got {shown(err['input'])})"
    varied = {k: v for k, v in cell.items() if k != "seed"}
    if varied:
        message += f"; in the cell with {shown(varied)}"
    return ConfigError(message, file=file, block=block, key=key, choices=choices)
