"""Grid files: load, validate against each task's Params, expand into cells with stable run ids.

A grid file is a name and a list of blocks (runner.grid.model); each block is a product of axes
(optionally with zipped axes, varied together) over fixed params, repeated over seeds
(runner.grid.blocks). Everything is validated before any work starts; the first problem becomes a
ConfigError that names the file, the block and the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from runner.errors import ConfigError, check_name
from runner.grid.block_ids import block_ids
from runner.grid.blocks import block_size, check_block
from runner.grid.cells import GridFile
from runner.grid.model import GridSpec, read_source, structure_error
from runner.settings import settings
from runner.store.index_keys import run_keys
from runner.store.spill import KeySpill, matched


def max_cells_default() -> int:
    return settings().max_cells


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
    grid_name = check_name(spec.name or default_name, file, "name" if spec.name else None)
    limit = max_cells if max_cells is not None else max_cells_default()
    sizes = [block_size(b) for b in spec.blocks]
    if sum(sizes) > limit:
        raise ConfigError(
            f"the grid has {sum(sizes):,} cells (blocks: {', '.join(f'{s:,}' for s in sizes)}), more than the limit "
            f"of {limit:,}; raise it with --max-cells N or CONVGRID_MAX_CELLS=N",
            file=file,
            key="blocks",
        )
    blocks = [check_block(b, file, i) for i, b in enumerate(spec.blocks)]
    ids = [block_ids(b) for b in blocks]
    every = GridFile(grid_name, file, spec.description, blocks, ids, checkpoint_every=spec.checkpoint_every)
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
