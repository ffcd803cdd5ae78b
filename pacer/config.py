"""Settings: every tunable of pacer, read from ``PACER_*`` environment variables.

Nested sections use ``__``: ``PACER_CONTROLLER__KP=0.4`` sets ``Settings().controller.kp``.
Sizes accept bytes or a unit (``PACER_MEMORY__BUDGET_BYTES=700GiB``). Building a Settings object
reads the environment and nothing else: no logging set-up, no files written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ByteSize,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "PACER_"
ENV_NESTED_DELIMITER = "__"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ControllerSettings(_Section):
    """The dispatch policy, and the gains, setpoint and limits of the PI controller."""

    policy: Literal["pi", "unpaced", "cuzk"] = Field(
        "pi",
        description="Dispatch policy: pi (the PI controller), or a baseline to compare it "
        "with: unpaced (dispatch whenever the memory budget allows) or cuzk (the cuzk "
        "engine's DispatchPacer) (pi/unpaced/cuzk)",
    )
    target_ready: float = Field(
        8.0, gt=0, description="Setpoint: partitions synthesized and waiting for a GPU (partitions)"
    )
    kp: float = Field(0.5, ge=0, description="Proportional gain on the normalized error (1)")
    ki: float = Field(0.01, ge=0, description="Integral gain on the normalized error (1/s)")
    integral_min: float = Field(-60.0, le=0, description="Lower clamp of the error integral (s)")
    integral_max: float = Field(60.0, ge=0, description="Upper clamp of the error integral (s)")
    multiplier_min: float = Field(
        0.25, gt=0, le=1, description="Lowest dispatch-rate multiplier 1+u (1)"
    )
    multiplier_max: float = Field(4.0, ge=1, description="Highest dispatch-rate multiplier 1+u (1)")
    interval_min_s: float = Field(
        0.001,
        gt=0,
        description="Shortest wait between two dispatch decisions; dispatch runs by rate, so "
        "what falls due meanwhile goes out together and the rate is not capped by it (s)",
    )
    interval_max_s: float = Field(
        60.0, gt=0, description="Longest interval between two dispatches while pacing (s)"
    )
    gpu_window: int = Field(
        64,
        ge=8,
        le=4096,
        description="GPU service time: the mean of this many latest samples (at least 8 per "
        "worker), less the longest and shortest one per worker; a change of level in the "
        "newest quarter drops the older ones (samples)",
    )
    synthesis_window: int = Field(
        64,
        ge=8,
        le=4096,
        description="Synthesis duration: the mean and spread of this many latest samples, "
        "or of two lead times of them where that is more; a change of level in the newest "
        "quarter drops the older ones (samples)",
    )
    bootstrap_depth: int = Field(
        0,
        ge=0,
        description="Partitions dispatched on a cold start, before any duration is known; 0: "
        "90 % of the smaller of the synthesis-concurrency and memory caps (partitions)",
    )
    spread_sigmas: float = Field(
        2.5,
        ge=0,
        description="Raise the setpoint to this many standard deviations of the ready "
        "queue's wander, estimated from the spread of synthesis times; 0: off (1)",
    )
    rebootstrap_hold_s: float = Field(
        1.0,
        ge=0,
        description="How long the pipeline must stay drained with work waiting before a "
        "re-bootstrap (s)",
    )

    @model_validator(mode="after")
    def _limits_ordered(self) -> Self:
        if self.interval_min_s >= self.interval_max_s:
            raise ValueError(
                f"interval_min_s ({self.interval_min_s}) must be less than "
                f"interval_max_s ({self.interval_max_s})"
            )
        return self


class SynthesisSettings(_Section):
    """What the host can give to CPU synthesis."""

    cores: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        description="CPU cores available to synthesis (cores; default: all of this host)",
    )
    threads_per_synthesis: int | None = Field(
        None,
        ge=1,
        description="Threads one synthesis keeps busy; unset: what the workload says (1 for "
        "ntt and noop), else 4 (threads)",
    )
    executor: Literal["threads", "processes"] = Field(
        "processes",
        description="Where the GPU path's synthesis runs: worker processes writing into shared "
        "pool slots pinned with cudaHostRegister (no GIL between them; the pool must fit in "
        "/dev/shm), or threads of the service (processes/threads)",
    )
    max_concurrent: int | None = Field(
        None,
        ge=1,
        description="Most syntheses running at once; unset: what the cores allow, cores ÷ "
        "threads per synthesis (partitions)",
    )


class MemorySettings(_Section):
    """The host-memory budget every in-flight partition is counted against."""

    budget_bytes: ByteSize = Field(
        ByteSize(64 * 2**30),
        gt=0,
        description="Host memory for partitions from dispatch until their GPU copy ends (bytes; "
        "units such as 700GiB accepted)",
    )
    partition_bytes: ByteSize = Field(
        ByteSize(0),
        ge=0,
        description="Host memory one partition holds, its a, b and c buffers; 0: the size the "
        "workload reports (bytes; units accepted)",
    )

    @model_validator(mode="after")
    def _partition_fits(self) -> Self:
        if self.partition_bytes > self.budget_bytes:
            raise ValueError(
                f"partition_bytes ({int(self.partition_bytes)}) must not exceed "
                f"budget_bytes ({int(self.budget_bytes)})"
            )
        return self


class ApiSettings(_Section):
    """The HTTP API: jobs, status, controller, metrics and health."""

    host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="Address to listen on; a non-loopback one needs a token or allow_public "
        "(address)",
    )
    port: int = Field(9470, ge=0, le=65535, description="TCP port; 0 picks a free one (port)")
    token: SecretStr | None = Field(
        None,
        description="Bearer token required by the endpoints that change state; unset: none "
        "(secret)",
    )
    allow_public: bool = Field(
        False,
        description="Allow a non-loopback address without a token (true/false)",
    )
    max_body_bytes: int = Field(
        65536, ge=1024, le=16 * 2**20, description="Largest request body accepted (bytes)"
    )


class JournalSettings(_Section):
    """The SQLite journal that makes accepted jobs survive a restart."""

    path: Path = Field(
        Path("pacer-journal.sqlite"), description="SQLite file of the job journal (path)"
    )
    retention_s: float = Field(
        7 * 86400.0, gt=0, description="How long finished jobs and their results are kept (s)"
    )
    commit_interval_s: float = Field(
        0.05,
        gt=0,
        le=5,
        description="Partition results are committed in batches at most this far apart; a "
        "crash redoes at most that much work (s)",
    )


class ShutdownSettings(_Section):
    """SIGTERM handling."""

    drain_s: float = Field(
        60.0,
        ge=0,
        description="On SIGTERM, how long in-flight work may finish before the rest is left "
        "to the journal (s)",
    )


class GpuSettings(_Section):
    """The proving workers and, with CUDA, the devices and the pinned pool."""

    workers: int = Field(
        1,
        ge=1,
        le=256,
        description="Proving workers in total when proving on the CPU (workers)",
    )
    devices: str = Field(
        "all",
        pattern=r"^(all|none|\d+(,\d+)*)$",
        description="GPUs to prove on: all, none (prove on the CPU) or indices such as 0,1 "
        "(devices)",
    )
    workers_per_device: int = Field(
        2,
        ge=1,
        le=8,
        description="Proving workers (each with its own stream) per GPU; two overlap one "
        "partition's copy with another's kernels (workers)",
    )
    pool_slots: int = Field(
        0,
        ge=0,
        description="Partitions the pinned host-memory pool holds; 0: one per synthesis the "
        "cores allow, plus twice target_ready, plus one per proving worker, within the memory "
        "budget (partitions)",
    )
    pool_on_empty: Literal["wait", "fallback"] = Field(
        "wait",
        description="When every pinned slot is taken: wait for one, or fall back to pageable "
        "memory (wait/fallback)",
    )


class NttSettings(_Section):
    """The built-in workload: the Groth16 H computation over a prime field."""

    field: Literal["babybear", "goldilocks"] | None = Field(
        None,
        description="Prime field: goldilocks (p = 2^64 − 2^32 + 1, 8-byte elements, domains up "
        "to 2^32) or babybear (p = 15·2^27 + 1, 4-byte elements, domains up to 2^27); unset: "
        "goldilocks when proving on GPUs, babybear on the CPU (babybear/goldilocks)",
    )
    log_n: int | None = Field(
        None,
        ge=4,
        le=30,
        description="Partition size as log2 of the NTT domain, at most the field's two-adicity; "
        "unset: 27 when proving on GPUs (Goldilocks: 3 GiB of a, b, c and ~130 ms of an H200 "
        "per partition), 18 on the CPU; on the CPU jobs may override it with params.log_n "
        "(log2 of elements)",
    )

    kernel: Literal["auto", "numba", "numpy"] = Field(
        "auto",
        description="How the ntt workload's CPU work, synthesis and verification, computes: "
        "compiled by Numba, holding no GIL (Goldilocks synthesis at 2.2 to 2.4 times NumPy's "
        "rate; pip install 'pacer[fast]', included in the gpu extras), or as whole-array NumPy "
        "calls; auto: numba where it is installed (auto/numba/numpy)",
    )

    @model_validator(mode="after")
    def _log_n_fits_the_field(self) -> Self:
        if self.field == "babybear" and self.log_n is not None and self.log_n > 27:
            raise ValueError(
                f"log_n: {self.log_n} exceeds 27, the largest power-of-two domain of babybear "
                "(its two-adicity); use PACER_NTT__FIELD=goldilocks for larger partitions"
            )
        return self


class Settings(BaseSettings):
    """All of pacer's settings. Environment variables override the defaults."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        validate_assignment=True,
    )

    workload: str = Field(
        "ntt",
        description="What a partition's work is: ntt (built-in), noop (pipeline benchmarks) or "
        "module:factory of your own (name)",
    )
    verify_every: int | None = Field(
        None,
        ge=0,
        description="Verify every n-th proved partition on the CPU; 0: never; unset: every "
        "one on the CPU, every 100th when proving on GPUs (partitions)",
    )
    controller: ControllerSettings = Field(default_factory=ControllerSettings)
    synthesis: SynthesisSettings = Field(default_factory=SynthesisSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    journal: JournalSettings = Field(default_factory=JournalSettings)
    shutdown: ShutdownSettings = Field(default_factory=ShutdownSettings)
    gpu: GpuSettings = Field(default_factory=GpuSettings)
    ntt: NttSettings = Field(default_factory=NttSettings)

    @field_validator("workload")
    @classmethod
    def _workload_name(cls, value: str) -> str:
        if value in ("ntt", "noop") or re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value):
            return value
        raise ValueError("must be ntt, noop or module:factory (e.g. mypkg.prover:make)")


class SettingsError(Exception):
    """Settings could not be built; ``problems`` holds one line per bad variable."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


def env_name(loc: tuple[int | str, ...]) -> str:
    """The variable of a field path: ``("controller", "kp")`` → ``PACER_CONTROLLER__KP``."""
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(str(part).upper() for part in loc)


@dataclass(frozen=True)
class Variable:
    """One environment variable of the schema: its name, default and description."""

    name: str
    default: str
    description: str


def _section_model(name: str) -> type[BaseModel] | None:
    model = Settings.model_fields[name].annotation
    if isinstance(model, type) and issubclass(model, BaseModel):
        return model
    return None


def variables() -> Iterator[Variable]:
    """Every environment variable the Settings schema reads, in declaration order."""
    for name, top in Settings.model_fields.items():
        section = _section_model(name)
        fields = [((name,), top)] if section is None else [
            ((name, field_name), field) for field_name, field in section.model_fields.items()
        ]  # fmt: skip
        for loc, field in fields:
            if field.default_factory is not None:
                default = "(host-dependent)"
            else:
                default = _render(field.default)
            yield Variable(env_name(loc), default, field.description or "")


def load_settings() -> Settings:
    """Build Settings from the environment.

    Raises SettingsError naming each offending variable and the rule it breaks, including
    ``PACER_*`` variables that match no setting (a typo would otherwise be ignored silently).
    """
    known = {v.name for v in variables()} | {env_name((name,)) for name in Settings.model_fields}
    unknown = sorted(key for key in os.environ if key.startswith(ENV_PREFIX) and key not in known)
    if unknown:
        raise SettingsError([f"{key}: not a pacer setting (see `pacer config`)" for key in unknown])
    try:
        return Settings()
    except ValidationError as exc:
        raise SettingsError([_describe(err) for err in exc.errors()]) from None


def _describe(err: Any) -> str:
    loc = tuple(err["loc"])
    value = err.get("input")
    message = str(err["msg"]).removeprefix("Value error, ")
    if isinstance(value, dict):
        # A rule across fields of one section: name each field by its variable.
        section = _section_model(str(loc[0]))
        fields = section.model_fields if section is not None else {}
        for field in sorted(fields, key=len, reverse=True):
            message = re.sub(rf"\b{re.escape(field)}\b", env_name((*loc, field)), message)
        return message
    return f"{env_name(loc)}: {message} (got {value!r})"


def _render(value: object) -> str:
    if isinstance(value, ByteSize):
        return str(int(value))
    if isinstance(value, SecretStr):
        return "**********"
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def effective(settings: Settings) -> list[tuple[Variable, str]]:
    """Each variable with the value ``settings`` holds for it (secrets masked)."""
    out = []
    for var in variables():
        value: object = settings
        for part in var.name.removeprefix(ENV_PREFIX).lower().split(ENV_NESTED_DELIMITER):
            value = getattr(value, part)
        out.append((var, _render(value)))
    return out


def markdown_table() -> str:
    """The README table of environment variables, generated from the schema."""
    lines = ["| Variable | Default | Meaning (unit) |", "|---|---|---|"]
    for var in variables():
        lines.append(f"| `{var.name}` | `{var.default}` | {var.description} |")
    return "\n".join(lines)
