"""The distributions a scenario draws durations and work multipliers from (TOML tables keyed
by ``dist``): ``fixed``, ``uniform``, ``lognormal`` and ``choice``."""

from __future__ import annotations

import math
from typing import Annotated, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


class Strict(BaseModel):
    """A scenario's table: unknown keys refused, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Fixed(Strict):
    dist: Literal["fixed"]
    value: float = Field(ge=0)

    @property
    def mean(self) -> float:
        return self.value

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.value)


class Uniform(Strict):
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


class LogNormal(Strict):
    """exp(N(ln median, sigma²)): sigma 0.1 to 0.25 for a quiet host, about 1 for a shared one
    (a heavy tail: the mean is median × exp(sigma² ÷ 2))."""

    dist: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(ge=0, le=3)

    @property
    def mean(self) -> float:
        return self.median * math.exp(self.sigma**2 / 2)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return self.median * np.exp(rng.normal(0.0, self.sigma, size))


class Choice(Strict):
    """One of ``values``, drawn independently each time with the ``weights`` (equal where
    none are given): ``{ dist = "choice", values = [1, 4], weights = [3, 1] }``."""

    dist: Literal["choice"]
    values: tuple[Annotated[float, Field(ge=0)], ...] = Field(min_length=1)
    weights: tuple[Annotated[float, Field(gt=0)], ...] | None = None

    @model_validator(mode="after")
    def _weights_match(self) -> Self:
        if self.weights is not None and len(self.weights) != len(self.values):
            raise ValueError(
                f"weights ({len(self.weights)}) must be as many as values ({len(self.values)})"
            )
        return self

    @property
    def _p(self) -> np.ndarray:
        weights = np.asarray(self.weights or [1.0] * len(self.values), dtype=float)
        return np.asarray(weights / weights.sum(), dtype=float)

    @property
    def mean(self) -> float:
        return float(np.dot(self._p, np.asarray(self.values, dtype=float)))

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=float), size=size, p=self._p)


Distribution = Annotated[Fixed | Uniform | LogNormal | Choice, Field(discriminator="dist")]
