"""`Settings`: every section together, read from ``PACER_*`` environment variables."""

from __future__ import annotations

import re

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pacer.config.control import ControllerSettings
from pacer.config.engines import EngineSettings
from pacer.config.journal import JournalSettings
from pacer.config.machine import GpuSettings, MemorySettings, NttSettings, SynthesisSettings
from pacer.config.operation import (
    ApiSettings,
    HealthSettings,
    RetrySettings,
    ShutdownSettings,
    TimeoutSettings,
)
from pacer.runtime.early_start import DEFAULT_WORKLOAD

ENV_PREFIX = "PACER_"
ENV_NESTED_DELIMITER = "__"


class Settings(BaseSettings):
    """All of pacer's settings. Environment variables override the defaults."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        validate_assignment=True,
        allow_inf_nan=False,
    )

    workload: str = Field(
        DEFAULT_WORKLOAD,
        description="What a partition's work is: module:factory, the factory returning a "
        "pacer.workload.Workload for these settings; gpu.workload:ntt (ntt for short) proves "
        "the H computation on the GPUs, or on the CPU without any; noop is built in "
        "(pipeline benchmarks) (name)",
    )
    verify_every: int | None = Field(
        None,
        ge=0,
        le=1_000_000_000,
        description="Verify every n-th proved partition on the CPU; 0: never; unset: every "
        "one on the CPU, every 100th when proving on GPUs (partitions)",
    )
    verify_threads: int = Field(
        1,
        ge=1,
        le=1024,
        description="Threads that verify, each taking a core, where synthesis runs in "
        "processes; a partition due for verification while they are all spoken for passes the "
        "pick to a later one, so verification never slows synthesis nor holds memory waiting "
        "(where synthesis runs in threads, verification takes turns on its threads) (threads)",
    )
    controller: ControllerSettings = Field(default_factory=ControllerSettings)
    synthesis: SynthesisSettings = Field(default_factory=SynthesisSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    journal: JournalSettings = Field(default_factory=JournalSettings)
    shutdown: ShutdownSettings = Field(default_factory=ShutdownSettings)
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    retry: RetrySettings = Field(default_factory=RetrySettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    engine: EngineSettings = Field(default_factory=EngineSettings)
    ntt: NttSettings = Field(default_factory=NttSettings)

    @field_validator("workload")
    @classmethod
    def _workload_name(cls, value: str) -> str:
        if value in ("ntt", "noop") or re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
            return value
        raise ValueError("must be ntt, noop or module:factory (e.g. mypkg.prover:make)")
