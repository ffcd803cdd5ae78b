"""Scenario files: the workload and host a simulation runs against (TOML).

A scenario that breaks a rule is refused with a ScenarioError naming the key
(``gpu.service_s.median``) and the rule.
"""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Fixed(_Strict):
    dist: Literal["fixed"]
    value: float = Field(ge=0)

    @property
    def mean(self) -> float:
        return self.value

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.value)


class Uniform(_Strict):
    dist: Literal["uniform"]
    low: float = Field(ge=0)
    high: float = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.low > self.high:
            raise ValueError(f"low ({self.low}) must not exceed high ({self.high})")
        return self

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.uniform(self.low, self.high, size)


class LogNormal(_Strict):
    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0, le=3)

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.median * np.exp(rng.normal(0.0, self.sigma, size))


Distribution = Annotated[Fixed | Uniform | LogNormal, Field(discriminator="dist")]


class Phase(_Strict):
    at_s: float = Field(ge=0)
    scale: float = Field(gt=0)


class Gpu(_Strict):
    workers: int = Field(ge=1, le=1024)
    service_s: Distribution
    phases: tuple[Phase, ...] = ()

    @model_validator(mode="after")
    def _phases_sorted(self) -> Self:
        times = [p.at_s for p in self.phases]
        if times != sorted(times):
            raise ValueError("phases must be listed in increasing at_s")
        return self

    def scale_at(self, t: float) -> float:
        """Service-time multiplier in force at time ``t`` (s)."""
        scale = 1.0
        for phase in self.phases:
            if phase.at_s <= t:
                scale = phase.scale
        return scale


class Synthesis(_Strict):
    duration_s: Distribution
    threads_per_synthesis: int = Field(ge=1)
    cores: int = Field(ge=1)


class Partition(_Strict):
    bytes: int = Field(gt=0)


class Memory(_Strict):
    budget_bytes: int = Field(gt=0)


class Backlog(_Strict):
    kind: Literal["backlog"]
    jobs: int = Field(ge=1)


class Poisson(_Strict):
    kind: Literal["poisson"]
    jobs_per_hour: float = Field(gt=0)
    jobs: int = Field(ge=1)


class Jobs(_Strict):
    partitions_per_job: int = Field(ge=1)
    arrival: Annotated[Backlog | Poisson, Field(discriminator="kind")]


class Scenario(_Strict):
    """One simulated host and workload; see README "Scenario files"."""

    name: str = Field(min_length=1)
    duration_s: float = Field(gt=0)
    seed: int = 0
    gpu: Gpu
    synthesis: Synthesis
    partition: Partition
    memory: Memory
    jobs: Jobs

    @model_validator(mode="after")
    def _partition_fits(self) -> Self:
        if self.partition.bytes > self.memory.budget_bytes:
            raise ValueError(
                f"partition.bytes ({self.partition.bytes}) must not exceed "
                f"memory.budget_bytes ({self.memory.budget_bytes})"
            )
        return self

    @property
    def total_partitions(self) -> int:
        return self.jobs.partitions_per_job * self.jobs.arrival.jobs

    @property
    def synthesis_slots(self) -> int:
        """Syntheses that run without contention: cores ÷ threads per synthesis."""
        return max(1, self.synthesis.cores // self.synthesis.threads_per_synthesis)

    @property
    def memory_slots(self) -> int:
        """Partitions the memory budget holds at once."""
        return self.memory.budget_bytes // self.partition.bytes

    @property
    def little_min_inflight(self) -> float:
        """W × (mean synthesis + mean GPU time) ÷ mean GPU time: in flight to keep W busy."""
        gpu = self.gpu.service_s.mean
        return self.gpu.workers * (self.synthesis.duration_s.mean + gpu) / gpu


class ScenarioError(Exception):
    """A scenario file could not be read; the message names the file, the key and the rule."""


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        raise ScenarioError("\n".join(f"{path}: {line}" for line in _lines(exc))) from None


def _lines(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        # Drop the union-member tags pydantic adds ("gpu.service_s.lognormal.median").
        loc = [str(p) for p in err["loc"] if p not in ("fixed", "uniform", "lognormal",
                                                         "backlog", "poisson")]  # fmt: skip
        key = ".".join(loc) or "(top level)"
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "missing":
            message = "required key is missing"
        elif err["type"] == "extra_forbidden":
            message = "unknown key"
        out.append(f"{key}: {message}")
    return out


def shipped_scenarios() -> list[Path]:
    """The scenario files shipped in ``pacer/sim/scenarios/``, sorted by name."""
    folder = resources.files("pacer.sim") / "scenarios"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".toml"))
