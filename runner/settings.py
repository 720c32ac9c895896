"""Every knob convgrid reads from the environment, in one place: `CONVGRID_<NAME>` for each field below.

    from runner.settings import settings
    settings().lease_s

Read through pydantic-settings, so a malformed value is one clear error naming the variable (exit 2 on
the command line), never a float() traceback deep in a run. The environment is read again whenever it
changed (tests, and a command that sets a variable for its workers), and only then: the hot paths that
ask (a worker resolving a learner per cell) pay a dictionary lookup.

This module is a leaf: every layer may import it (tasks and cluster included), and it imports nothing of
convgrid but runner.errors.
"""

from __future__ import annotations

import os
from functools import lru_cache
from typing import Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from runner.errors import ConfigError
from tasks.registry import parse_learners

PREFIX = "CONVGRID_"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", frozen=True)

    ask_processes: Literal["auto", "on", "off"] = Field(
        "auto",
        description="an async study with parallel > 1 asks its trials in processes of their own (one per trial in "
        "flight, up to half the CPUs): 'auto' once the driver's asks are slower than its runs and enough are left "
        "to pay their start, 'on' at once, 'off' never",
    )
    cache: str = Field(
        "", description="folder of the validated-block cache; 'off' for none; empty: $XDG_CACHE_HOME/convgrid/blocks"
    )
    compact_parts: int = Field(
        64, ge=0, description="after a run, merge the small parts of every folder holding more (0: never)"
    )
    connect_timeout_s: float = Field(
        60.0, gt=0, description="seconds joining a Ray cluster (--address) may take before the command gives up"
    )
    head_grace_s: float = Field(
        15.0, gt=0, description="seconds a joined cluster's head may be unreachable before the driver gives up"
    )
    keep_final_s: float = Field(
        1.0,
        ge=0,
        description="a run whose budget can grow keeps its final state (for a longer run to start from) only where "
        "it took at least this many seconds: a shorter one is cheaper to run again than to keep",
    )
    learners: str = Field("", description="learners outside this repository: name=package[,name=package...]")
    lease_s: float = Field(
        30.0,
        gt=0,
        description="drivers sharing a grid take over the blocks of one silent this long (--lease); a study's "
        "driver takes over the study of one silent this long",
    )
    lock_lease_s: float = Field(
        30.0, gt=0, description="an object-store root's writers' lock passes on from a writer silent this long"
    )
    max_cells: int = Field(10_000_000, ge=1, description="grids of more cells are refused (--max-cells)")
    max_workers: int = Field(
        0,
        ge=0,
        description="the most --workers may ask for (an autoscaling cluster's full size); 0: the CPU slots the "
        "machine or the joined cluster has",
    )
    ray_cost_s: float = Field(
        5.0, ge=0, description="what starting, warming and stopping the embedded Ray costs (the auto executor)"
    )
    small_work_s: float = Field(
        3.0, ge=0, description="a grid whose stored run times say it takes less runs in process (the auto executor)"
    )
    spill_rows: int = Field(262_144, ge=1, description="rows a key spill holds in memory before using temp files")

    @field_validator("learners")
    @classmethod
    def _entries(cls, value: str) -> str:
        parse_learners(value)
        return value

    def learner_packages(self) -> dict[str, str]:
        """name -> package of the learners named in CONVGRID_LEARNERS."""
        return parse_learners(self.learners)


def env_name(field: str) -> str:
    """The environment variable of a settings field (`lease_s` -> CONVGRID_LEASE_S)."""
    if field not in Settings.model_fields:
        raise KeyError(field)
    return PREFIX + field.upper()


def settings() -> Settings:
    """The settings as the environment says now (read again only when a CONVGRID_ variable changed)."""
    # the names first: reading every value of the environment (os.environ decodes each) cost 3x more,
    # and a worker asks once or twice per cell
    return _settings(tuple(sorted((k, os.environ[k]) for k in os.environ if k.startswith(PREFIX))))


@lru_cache(maxsize=8)
def _settings(_environment: tuple[tuple[str, str], ...]) -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        error = exc.errors()[0]
        name = PREFIX + str(error["loc"][0]).upper()
        raise ConfigError(f"{error['msg']} (got {os.environ.get(name)!r})", file="environment", key=name) from None


def describe() -> list[tuple[str, object, str]]:
    """(variable, default, what it does) of every knob: for the docs and `convgrid --help`."""
    return [
        (PREFIX + name.upper(), field.default, field.description or "") for name, field in Settings.model_fields.items()
    ]
