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
MIN_TOKEN_CHARS = 16
MAX_TOKEN_CHARS = 4096


class _Section(BaseModel):
    # allow_inf_nan=False: "inf", "nan" and "1e400" are refused rather than turned into a
    # float that overflows a decision or an interval later.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ControllerSettings(_Section):
    """The dispatch policy, and the gains, setpoint and limits of the PI controller."""

    policy: Literal["pi", "unpaced", "cuzk", "cuzk-default"] = Field(
        "pi",
        description="Dispatch policy: pi (the PI controller), or a baseline to compare it "
        "with: unpaced (dispatch whenever the memory budget allows), cuzk (the cuzk "
        "engine's dispatcher with its DispatchPacer at setpoint 8) or cuzk-default (the same "
        "dispatcher as shipped, pacer off) (pi/unpaced/cuzk/cuzk-default)",
    )
    target_ready: float = Field(
        8.0,
        gt=0,
        le=100_000,
        description="Least setpoint: partitions synthesized and waiting for a GPU, whatever "
        "target_ready_s comes to (partitions)",
    )
    target_ready_s: float = Field(
        0.0,
        ge=0,
        le=3600,
        description="Setpoint as a ready buffer of GPU work: this many seconds of it (GPU "
        "time ÷ workers per partition), so it scales with GPU speed and worker count; the "
        "setpoint is the larger of this and target_ready; 0: target_ready alone (s)",
    )
    kp: float = Field(
        0.0,
        ge=0,
        le=100,
        description="Proportional gain on the prediction error, the ready depth observed less "
        "the one predicted a synthesis lead time earlier; 0: trust the model (1)",
    )
    ki: float = Field(
        0.2,
        ge=0,
        le=100,
        description="Integral gain on the prediction error, per synthesis lead time (the "
        "loop's delay): the share of a persistent model bias removed each lead time (1/lead)",
    )
    integral_min: float = Field(
        -200.0,
        ge=-1e6,
        le=0,
        description="Lower clamp of the prediction-error integral over time in lead times "
        "(partition-leads)",
    )
    integral_max: float = Field(
        200.0,
        ge=0,
        le=1e6,
        description="Upper clamp of the prediction-error integral over time in lead times "
        "(partition-leads)",
    )
    multiplier_min: float = Field(
        0.25, ge=0.001, le=1, description="Lowest dispatch-rate multiplier 1+u (1)"
    )
    multiplier_max: float = Field(
        4.0, ge=1, le=1000, description="Highest dispatch-rate multiplier 1+u (1)"
    )
    interval_min_s: float = Field(
        0.001,
        ge=1e-6,
        le=3600,
        description="Shortest wait between two dispatch decisions; dispatch runs by rate, so "
        "what falls due meanwhile goes out together and the rate is not capped by it (s)",
    )
    interval_max_s: float = Field(
        60.0,
        gt=0,
        le=86400,
        description="Longest interval between two dispatches while pacing (s)",
    )
    gpu_window: int = Field(
        64,
        ge=8,
        le=4096,
        description="GPU service time: the mean of this many latest samples (at least 8 per "
        "worker, and doubled until the mean is known within 5 % where the samples spread "
        "widely, as with partitions of several sizes), less the longest and shortest one "
        "per worker; a change of level in the newest quarter drops the older ones (samples)",
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
        le=1_000_000,
        description="Partitions dispatched on a cold start, before any duration is known; 0: "
        "90 % of the smaller of the synthesis-concurrency and memory caps (partitions)",
    )
    spread_sigmas: float = Field(
        2.5,
        ge=0,
        le=10,
        description="Raise the setpoint to this many standard deviations of the ready "
        "queue's wander, estimated from the spread of synthesis times; 0: off (1)",
    )
    rebootstrap_hold_s: float = Field(
        1.0,
        ge=0,
        le=3600,
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
        le=65536,
        description="CPU cores available to synthesis (cores; default: all of this host)",
    )
    threads_per_synthesis: int | None = Field(
        None,
        ge=1,
        le=4096,
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
        le=65536,
        description="Most syntheses running at once; unset: what the cores allow, cores ÷ "
        "threads per synthesis (partitions)",
    )


class MemorySettings(_Section):
    """The host-memory budget every in-flight partition is counted against."""

    budget_bytes: ByteSize = Field(
        ByteSize(64 * 2**30),
        gt=0,
        le=2**50,
        description="Host memory for partitions from dispatch until their GPU copy ends, at "
        "most 1 PiB (bytes; units such as 700GiB accepted)",
    )
    partition_bytes: ByteSize = Field(
        ByteSize(0),
        ge=0,
        le=2**50,
        description="Host memory one partition holds, its a, b and c buffers; 0: the size the "
        "workload reports (bytes; units accepted)",
    )
    host_reserve_bytes: ByteSize = Field(
        ByteSize(0),
        ge=0,
        le=2**50,
        description="Host memory left to everything else: at start the budget is clamped to "
        "MemAvailable less this, and a pinned pool larger than that refuses to start; 0: 10% "
        "of MemTotal, at most 8 GiB (bytes; units accepted)",
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
        max_length=253,
        description="Address to listen on; a non-loopback one needs a token or allow_public "
        "(address)",
    )
    port: int = Field(9470, ge=0, le=65535, description="TCP port; 0 picks a free one (port)")
    token: SecretStr | None = Field(
        None,
        description=f"Bearer token required by the endpoints that change state, at least "
        f"{MIN_TOKEN_CHARS} visible ASCII characters (e.g. openssl rand -hex 32); unset: none "
        "(secret)",
    )
    allow_public: bool = Field(
        False,
        description="Allow a non-loopback address without a token (true/false)",
    )
    max_body_bytes: int = Field(
        65536, ge=1024, le=16 * 2**20, description="Largest request body accepted (bytes)"
    )
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=300,
        description="A request line and headers must arrive complete within this time of the "
        "connection opening, or of their first byte; else the connection is closed (s)",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="A request body must arrive complete within this time of the handler "
        "starting to read it; else 408 and the connection is closed (s)",
    )
    keepalive_timeout_s: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="An idle connection between two requests is closed after this time (s)",
    )
    max_backlog: int = Field(
        4_000_000,
        ge=1,
        le=100_000_000,
        description="Most partitions waiting to be dispatched (held as runs of indices: at "
        "most 16 bytes of service memory each); a job that would exceed it gets 429 with "
        "Retry-After (partitions)",
    )

    @field_validator("token")
    @classmethod
    def _token_strong_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        secret = value.get_secret_value()
        # Refuse without echoing the token: this message is printed and logged.
        if len(secret) < MIN_TOKEN_CHARS:
            raise ValueError(
                f"must be at least {MIN_TOKEN_CHARS} characters, got {len(secret)} (a random "
                "one: openssl rand -hex 32); leave it unset for no token"
            )
        if len(secret) > MAX_TOKEN_CHARS or not re.fullmatch(r"[\x21-\x7e]+", secret):
            raise ValueError(
                f"must be visible ASCII characters without spaces, at most {MAX_TOKEN_CHARS} "
                "(it is sent in an HTTP header)"
            )
        return value


class JournalSettings(_Section):
    """The SQLite journal that makes accepted jobs survive a restart."""

    path: Path = Field(
        Path("pacer-journal.sqlite"), description="SQLite file of the job journal (path)"
    )
    retention_s: float = Field(
        7 * 86400.0,
        gt=0,
        le=10 * 365 * 86400.0,
        description="How long finished jobs, their results and idempotency keys are kept (s)",
    )
    commit_interval_s: float = Field(
        0.05,
        gt=0,
        le=5,
        description="Partition results are committed in batches at most this far apart; a "
        "crash redoes at most that much work (s)",
    )
    busy_timeout_s: float = Field(
        5.0,
        ge=0,
        le=600,
        description="How long a journal write waits for a lock another program holds on the "
        "file before it fails and is retried later (s)",
    )


class ShutdownSettings(_Section):
    """SIGTERM handling."""

    drain_s: float = Field(
        60.0,
        ge=0,
        le=86400,
        description="On SIGTERM, how long in-flight work may finish before the rest is left "
        "to the journal (s)",
    )


class TimeoutSettings(_Section):
    """How long one synthesize, prove or verify call may run before it is abandoned.

    A limit left at 0 is derived: max(floor, estimate_multiple × the controller's estimate),
    the GPU service time for prove and the synthesis duration for synthesis and verify (the
    same buffers, read on the CPU); the floor alone until an estimate exists.
    """

    synthesis_s: float = Field(
        0.0,
        ge=0,
        le=86400,
        description="Longest one synthesis may run before its attempt fails and its thread is "
        "replaced; 0: max(synthesis_floor_s, estimate_multiple × the synthesis estimate) (s)",
    )
    prove_s: float = Field(
        0.0,
        ge=0,
        le=86400,
        description="Longest one prove may run before its attempt fails and its worker is "
        "replaced; 0: max(prove_floor_s, estimate_multiple × the GPU service-time estimate) (s)",
    )
    verify_s: float = Field(
        0.0,
        ge=0,
        le=86400,
        description="Longest one verification may run before its attempt fails; 0: "
        "max(verify_floor_s, estimate_multiple × the synthesis estimate) (s)",
    )
    estimate_multiple: float = Field(
        10.0,
        ge=1,
        le=1000,
        description="A derived limit is this many times the controller's estimate of the "
        "call's duration, at least its floor (1)",
    )
    synthesis_floor_s: float = Field(
        600.0,
        gt=0,
        le=86400,
        description="Least derived synthesis limit; the whole limit until a synthesis "
        "duration is known (s)",
    )
    prove_floor_s: float = Field(
        300.0,
        gt=0,
        le=86400,
        description="Least derived prove limit; the whole limit until a GPU service time is "
        "known (s)",
    )
    verify_floor_s: float = Field(
        600.0,
        gt=0,
        le=86400,
        description="Least derived verification limit; the whole limit until a synthesis "
        "duration is known (s)",
    )


class RetrySettings(_Section):
    """What happens to a partition whose attempt failed (raised, timed out, a bad proof)."""

    max: int = Field(
        3,
        ge=1,
        le=100,
        description="Attempts per partition before its job fails; 1: no retry (attempts)",
    )
    backoff_s: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="Wait before a partition's second attempt, doubling for each later one (s)",
    )
    backoff_max_s: float = Field(
        60.0, ge=0, le=86400, description="Longest wait before an attempt, however many failed (s)"
    )


class HealthSettings(_Section):
    """What /readyz reports beside starting and draining: tasks down, and stalls."""

    stall_s: float = Field(
        300.0,
        ge=0,
        le=86400,
        description="Not ready while work waits and nothing has been synthesized, proved or "
        "committed for this long; 0: never (s)",
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
        le=1_000_000,
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
        allow_inf_nan=False,
    )

    workload: str = Field(
        "ntt",
        description="What a partition's work is: ntt (built-in), noop (pipeline benchmarks) or "
        "module:factory of your own (name)",
    )
    verify_every: int | None = Field(
        None,
        ge=0,
        le=1_000_000_000,
        description="Verify every n-th proved partition on the CPU; 0: never; unset: every "
        "one on the CPU, every 100th when proving on GPUs (partitions)",
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
    if _is_secret(loc):
        return f"{env_name(loc)}: {message}"  # never echo a secret
    return f"{env_name(loc)}: {message} (got {value!r})"


def _is_secret(loc: tuple[int | str, ...]) -> bool:
    section = _section_model(str(loc[0])) if len(loc) == 2 else None
    field = section.model_fields.get(str(loc[1])) if section is not None else None
    return field is not None and "SecretStr" in str(field.annotation)


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
