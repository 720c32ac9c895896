"""The search space of a study file: one model per kind of searched param, and the few facts about
a space that validation needs (its first point, its extremes, how many points a grid sampler visits).
Plain pydantic: nothing here knows Optuna."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Bounds of a search space must be numbers Optuna can sample between (`high: .inf` is not).
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
MAX_GRID_POINTS = 1_000_000  # the grid sampler materialises its grid; more points than this is a typo


class Strict(BaseModel):
    """Extra keys refused, and no coercion: YAML's `true` is not the count 1 (nor a bound, nor a seed), and
    `"3"` is not 3. An int stays valid where a float belongs."""

    model_config = ConfigDict(extra="forbid", strict=True)


class FloatParam(Strict):
    type: Literal["float"]
    low: FiniteFloat
    high: FiniteFloat
    log: bool = False
    step: float | None = Field(None, gt=0)
    grid: list[float] | None = Field(None, min_length=1, description="the points the grid sampler visits")


class IntParam(Strict):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = Field(1, ge=1)
    grid: list[int] | None = Field(None, min_length=1)


class CategoricalParam(Strict):
    type: Literal["categorical"]
    choices: list[None | bool | int | float | str] = Field(min_length=1)


class FloatVectorParam(Strict):
    """A list-valued param searched element-wise, e.g. the K*L coefficients of a learned polynomial.

    The sampler sees `size` floats named `name[0]`, ..., `name[size-1]`; the task receives one list.
    `start` (a value for every element, or one per element) is where CMA-ES centres its first
    generation and what the space's validation point uses."""

    type: Literal["float_vector"]
    size: int = Field(ge=1, le=4096)
    low: FiniteFloat
    high: FiniteFloat
    log: bool = False
    start: float | list[float] | None = None

    def start_values(self) -> list[float]:
        if self.start is None:
            return [self.low] * self.size
        return list(self.start) if isinstance(self.start, list) else [self.start] * self.size


SpaceParam = Annotated[FloatParam | IntParam | CategoricalParam | FloatVectorParam, Field(discriminator="type")]
AnySpaceParam = FloatParam | IntParam | CategoricalParam | FloatVectorParam


def element_name(name: str, i: int) -> str:
    """The sampler's name of element i of a vector param (also its key in the trials/ params)."""
    return f"{name}[{i}]"


def first_point(p: AnySpaceParam) -> Any:
    if isinstance(p, CategoricalParam):
        return p.choices[0]
    if isinstance(p, FloatVectorParam):
        return p.start_values()
    return p.grid[0] if p.grid else p.low


def extremes(p: AnySpaceParam) -> list[Any]:
    if isinstance(p, CategoricalParam):
        return list(p.choices)
    if isinstance(p, FloatVectorParam):
        return [[p.low] * p.size, [p.high] * p.size]
    return list(p.grid) if p.grid else [p.low, p.high]


def grid_points(p: AnySpaceParam) -> int:
    """How many points the grid sampler would visit for one param, counted without listing them."""
    if isinstance(p, CategoricalParam):
        return len(p.choices)
    if isinstance(p, FloatVectorParam):
        return 0  # refused separately
    if p.grid is not None:
        return len(p.grid)
    step = p.step or 1
    return int(math.floor((p.high - p.low) / step + 1e-9)) + 1
