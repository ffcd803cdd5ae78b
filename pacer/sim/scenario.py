"""Scenario files: the workload and host a simulation runs against (TOML).

A scenario that breaks a rule is refused with a ScenarioError naming the key
(``gpu.service_s.median``) and the rule.
"""

from __future__ import annotations

import itertools
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import ByteSize, Field, ValidationError, model_validator

from pacer.sim.distributions import Distribution, Strict
from pacer.sim.disturbances import (
    Death,
    Hang,
    Outage,
    Phase,
    Stall,
    SynthesisFailure,
    scale_at,
    sorted_phases,
)


class Gpu(Strict):
    workers: int = Field(ge=1, le=4096)
    service_s: Distribution
    phases: tuple[Phase, ...] = ()
    stalls: tuple[Stall, ...] = ()
    deaths: tuple[Death, ...] = ()
    outages: tuple[Outage, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        sorted_phases(self.phases)
        spans = sorted((s.at_s, s.at_s + s.duration_s) for s in self.stalls)
        if any(b[0] < a[1] for a, b in itertools.pairwise(spans)):
            raise ValueError("stalls must not overlap")
        workers = [d.worker for d in self.deaths]
        if any(w >= self.workers for w in workers):
            raise ValueError(f"deaths: worker must be below workers ({self.workers})")
        if len(set(workers)) != len(workers):
            raise ValueError("deaths: a worker dies once")
        away: dict[int, list[tuple[float, float]]] = {}
        for outage in self.outages:
            for w in outage.workers:
                if w >= self.workers:
                    raise ValueError(f"outages: worker must be below workers ({self.workers})")
                away.setdefault(w, []).append((outage.at_s, outage.at_s + outage.duration_s))
        for w, spans in away.items():
            spans.sort()
            if any(b[0] < a[1] for a, b in itertools.pairwise(spans)):
                raise ValueError(f"outages: worker {w}'s outages must not overlap")
        return self

    def scale_at(self, t: float) -> float:
        """Service-time multiplier in force at time ``t`` (s)."""
        return scale_at(self.phases, t)

    def live_at(self, t: float) -> int:
        """Workers alive and present at time ``t`` (s)."""
        dead = {d.worker for d in self.deaths if d.at_s <= t}
        away = {w for o in self.outages if o.at_s <= t < o.at_s + o.duration_s
                for w in o.workers}  # fmt: skip
        return self.workers - len(dead | away)


class Executor(Strict):
    """Synthesis in worker processes, as the service runs it: at most ``processes`` run at
    once and the others wait for one in dispatch order. A dispatch reaches the processes
    ``handoff_s`` after it is made: the trip from a synthesis's end through the service's
    event loop to the next one's start, which a process spends idle unless a partition
    already waits for it. ``verify_threads`` check proofs on the CPU beside the processes,
    where the partitions carry a check's time (a replay's ``verify_s``): a partition to check
    holds its memory from the end of its GPU work until a thread has checked it, waiting for
    one in the order the GPU work ended. With 0 the checks take turns on the processes, as
    where the service runs synthesis in threads: a check waits for a free one with the
    syntheses, in the order each was handed to them."""

    processes: int = Field(ge=1, le=65536)
    handoff_s: float = Field(0.0, ge=0, le=60)
    verify_threads: int = Field(1, ge=0, le=1024)


class Synthesis(Strict):
    duration_s: Distribution
    threads_per_synthesis: int = Field(ge=1)
    cores: int = Field(ge=1)
    # The host's CPU speed: from at_s on, synthesis work takes ``scale`` times as long (work
    # in progress too, as when another process takes the cores).
    phases: tuple[Phase, ...] = ()
    failures: tuple[SynthesisFailure, ...] = ()
    hangs: tuple[Hang, ...] = ()
    # None: every dispatched synthesis starts at once, sharing the cores.
    executor: Executor | None = None

    @model_validator(mode="after")
    def _phases_sorted(self) -> Self:
        sorted_phases(self.phases)
        if [h.at_s for h in self.hangs] != sorted(h.at_s for h in self.hangs):
            raise ValueError("hangs must be listed in increasing at_s")
        return self

    def scale_at(self, t: float) -> float:
        """Synthesis-duration multiplier in force at time ``t`` (s)."""
        return scale_at(self.phases, t)


# Sizes as the settings take them: bytes, or with a unit ("128GiB", "3GB"): one parser, pydantic's.
class Partition(Strict):
    bytes: ByteSize = Field(gt=0)


class Memory(Strict):
    budget_bytes: ByteSize = Field(gt=0)


class Backlog(Strict):
    kind: Literal["backlog"]
    jobs: int = Field(ge=1)


class Poisson(Strict):
    kind: Literal["poisson"]
    jobs_per_hour: float = Field(gt=0)
    jobs: int = Field(ge=1)


class Bursts(Strict):
    """``per_burst`` jobs arrive together every ``every_s``, from time 0, ``jobs`` in all."""

    kind: Literal["bursts"]
    jobs: int = Field(ge=1)
    per_burst: int = Field(ge=1)
    every_s: float = Field(gt=0)


class Jobs(Strict):
    partitions_per_job: int = Field(ge=1)
    arrival: Annotated[Backlog | Poisson | Bursts, Field(discriminator="kind")]
    # Work per partition of job i: synthesis and GPU time × work_scales[i % len] (the bytes
    # a partition holds stay the same).
    work_scales: tuple[Annotated[float, Field(gt=0)], ...] = (1.0,)
    # Work of each partition, drawn independently of every other: its synthesis and GPU time
    # × a draw (on top of work_scales), e.g. { dist = "choice", values = [1, 4] }.
    partition_work: Distribution | None = None

    @model_validator(mode="after")
    def _scales(self) -> Self:
        if not self.work_scales:
            raise ValueError("work_scales must list at least one scale")
        if self.partition_work is not None and self.partition_work.mean <= 0:
            raise ValueError("partition_work must have a mean above 0")
        return self

    @property
    def mean_work_scale(self) -> float:
        per_partition = 1.0 if self.partition_work is None else self.partition_work.mean
        return sum(self.work_scales) / len(self.work_scales) * per_partition


class WarmStart(Strict):
    """Estimates the ``pi`` policy starts from, as if saved by an earlier run (s)."""

    gpu_service_s: float = Field(gt=0)
    synthesis_s: float = Field(gt=0)
    synthesis_sd_s: float = Field(0.0, ge=0)


class Targets(Strict):
    """Targets of this scenario beyond the suite's own."""

    gpu_busy_min: float | None = Field(None, gt=0, le=1)


class Scenario(Strict):
    """One simulated host and workload; see docs/simulating.md, "Scenario files"."""

    name: str = Field(min_length=1)
    description: str = Field("", max_length=200)  # one line, for `pacer simulate --list`
    duration_s: float = Field(gt=0)
    seed: int = 0
    gpu: Gpu
    synthesis: Synthesis
    partition: Partition
    memory: Memory
    jobs: Jobs
    warm_start: WarmStart | None = None
    targets: Targets = Targets()

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
        """Syntheses that run without contention: cores ÷ threads per synthesis, and no more
        than the executor's processes."""
        slots = max(1, self.synthesis.cores // self.synthesis.threads_per_synthesis)
        executor = self.synthesis.executor
        return slots if executor is None else min(slots, executor.processes)

    @property
    def memory_slots(self) -> int:
        """Partitions the memory budget holds at once."""
        return self.memory.budget_bytes // self.partition.bytes

    @property
    def little_min_inflight(self) -> float:
        """W × (mean synthesis + mean GPU time) ÷ mean GPU time: in flight to keep W busy."""
        gpu = self.gpu.service_s.mean
        return self.gpu.workers * (self.synthesis.duration_s.mean + gpu) / gpu

    def regimes(self) -> list[Regime]:
        """The stretches of time between changes of GPU speed, CPU speed or live workers,
        each with what limits throughput there (during a stall, no worker delivers)."""
        stalls = [(s.at_s, s.at_s + s.duration_s) for s in self.gpu.stalls]
        edges = sorted(
            {0.0}
            | {p.at_s for p in self.gpu.phases}
            | {p.at_s for p in self.synthesis.phases}
            | {d.at_s for d in self.gpu.deaths}
            | {t for span in stalls for t in span}
            | {t for o in self.gpu.outages for t in (o.at_s, o.at_s + o.duration_s)}
        )
        scale = self.jobs.mean_work_scale
        out = []
        for start, stop in itertools.pairwise([*edges, math.inf]):
            stalled = any(a <= start < b for a, b in stalls)
            out.append(
                Regime(
                    start_s=start,
                    stop_s=stop,
                    workers=0 if stalled else self.gpu.live_at(start),
                    gpu_s=self.gpu.service_s.mean * self.gpu.scale_at(start) * scale,
                    synthesis_s=self.synthesis.duration_s.mean
                    * self.synthesis.scale_at(start)
                    * scale,
                    synthesis_slots=self.synthesis_slots,
                    memory_slots=self.memory_slots,
                )
            )
        return out

    def disturbances(self) -> list[float]:
        """When each disturbance ends and the pipeline must recover (s): a change of GPU or CPU
        speed, the end of a stall, a worker's death, workers leaving or returning, and a warm
        start (at 0)."""
        times = {p.at_s for p in self.gpu.phases} | {p.at_s for p in self.synthesis.phases}
        times |= {s.at_s + s.duration_s for s in self.gpu.stalls}
        times |= {d.at_s for d in self.gpu.deaths}
        times |= {t for o in self.gpu.outages for t in (o.at_s, o.at_s + o.duration_s)}
        if self.warm_start is not None:
            times.add(0.0)
        return sorted(times)


@dataclass(frozen=True)
class Regime:
    """A stretch of a scenario with fixed speeds and workers; means in seconds."""

    start_s: float
    stop_s: float
    workers: int
    gpu_s: float
    synthesis_s: float
    synthesis_slots: int
    memory_slots: int

    @property
    def bounds(self) -> dict[str, float]:
        """Throughput each resource allows (partitions/s)."""
        return {
            "gpu": self.workers / self.gpu_s if self.workers else 0.0,
            "synthesis": self.synthesis_slots / self.synthesis_s,
            "memory": self.memory_slots / (self.synthesis_s + self.gpu_s),
        }

    @property
    def throughput(self) -> float:
        return min(self.bounds.values())

    @property
    def little_min_inflight(self) -> float:
        """Partitions in flight that sustain the bound throughput: X × (synthesis + GPU)."""
        return self.throughput * (self.synthesis_s + self.gpu_s)

    @property
    def achievable_busy(self) -> float:
        """The busy ratio of the live workers at the bound throughput."""
        return min(1.0, self.throughput * self.gpu_s / self.workers) if self.workers else 0.0


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


_UNION_TAGS = ("fixed", "uniform", "lognormal", "choice", "backlog", "poisson", "bursts")


def _lines(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        # Drop the union-member tags pydantic adds ("gpu.service_s.lognormal.median").
        loc = [str(p) for p in err["loc"] if p not in _UNION_TAGS]
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


def scenario_path(spec: str) -> Path:
    """The file a scenario argument names: ``spec`` itself when it is a path (it holds a
    ``/`` or ends in ``.toml``), else the shipped scenario of that name (``h200``).
    ScenarioError listing the shipped names when there is none."""
    if "/" in spec or spec.endswith(".toml"):
        return Path(spec)
    shipped = {p.stem: p for p in shipped_scenarios()}
    if spec in shipped:
        return shipped[spec]
    raise ScenarioError(
        f"{spec}: no shipped scenario of that name (a file's name ends in .toml); shipped: "
        + ", ".join(shipped)
    )
