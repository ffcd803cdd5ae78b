"""A recording replayed on a host under some settings: the scenario around it, and what the GPUs
and the memory did (`pacer tune` runs one of these for each point of its grid).

The host's shape (GPU workers, cores, threads per synthesis, the memory budget, a partition's
bytes) comes from the settings or flags; the partitions' durations and arrivals come from the
recording (`pacer.sim.recording`). Synthesis runs as the service runs it: on cores ÷ threads
per synthesis workers, a dispatch beyond them waiting for one (the recording's own waits left
out). Each seed is one replay: seed 0 as recorded, the others
each job's partitions drawn again from that job's; the numbers are means over the seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pacer.config import Settings
from pacer.host.memory import bytes_text
from pacer.sim.engine import RawRun, Replay, Simulation
from pacer.sim.policies import policy_factory
from pacer.sim.recording import Recording
from pacer.sim.report import summarize
from pacer.sim.scenario import Scenario

HORIZON_FACTOR = 10.0  # the run stops at this many times the least time the work takes


@dataclass(frozen=True)
class HostShape:
    """The host a recording is replayed on (sizes in bytes)."""

    workers: int  # GPU workers
    cores: int  # CPU cores synthesis may use
    threads_per_synthesis: int
    budget_bytes: int  # the memory budget partitions in flight are held to
    partition_bytes: int  # what one partition holds
    # Threads that check proofs on the CPU (PACER_VERIFY_THREADS); 0: the checks take turns
    # on the synthesis workers, as where the service runs synthesis in threads.
    verify_threads: int = 1

    def __post_init__(self) -> None:
        if self.partition_bytes > self.budget_bytes:
            raise ValueError(
                f"a partition's {self.partition_bytes} bytes must not exceed the memory "
                f"budget's {self.budget_bytes} (PACER_MEMORY__BUDGET_BYTES, --budget)"
            )

    @property
    def synthesis_slots(self) -> int:
        """Syntheses that run at once: cores ÷ threads per synthesis, at least one."""
        return max(1, self.cores // self.threads_per_synthesis)

    def describe(self, checks: bool = False) -> str:
        """``GPU workers 2, cores 32, threads a synthesis 1, budget 120.0 GiB, partition
        3.0 GiB``; with ``checks``, and ``, verify threads 1`` (or ``, checks on the synthesis
        workers``)."""
        text = (f"GPU workers {self.workers}, cores {self.cores}, threads a synthesis "
                f"{self.threads_per_synthesis}, budget {bytes_text(self.budget_bytes)}, "
                f"partition {bytes_text(self.partition_bytes)}")  # fmt: skip
        if checks:
            text += (f", verify threads {self.verify_threads}" if self.verify_threads
                     else ", checks on the synthesis workers")  # fmt: skip
        return text


@dataclass(frozen=True)
class Outcome:
    """What a recording's replays under one setting came to: means over the seeds, but
    ``busy_min`` (the least busy seed) and ``peak_bytes`` (the most held by any)."""

    busy: float  # GPU busy share while partitions waited for dispatch (`waiting_busy`)
    busy_min: float
    memory_bytes: float  # memory held by partitions in flight, mean while work was available
    peak_bytes: int
    completed: bool  # every seed proved every partition before the horizon

    @property
    def idle(self) -> float:
        """The share of GPU time idle while work was available."""
        return 1.0 - self.busy


def scenario_for(replay: Replay, host: HostShape, name: str = "recording") -> Scenario:
    """A scenario with ``host``'s shape for ``replay``: the means its reports measure against
    (bounds, Little's law) are the replay's; its end leaves the work HORIZON_FACTOR times the
    least time it takes."""
    syn, gpu = float(np.mean(replay.synthesis_s)), float(np.mean(replay.gpu_s))
    slots = host.synthesis_slots
    least_s = max(
        float(np.sum(replay.synthesis_s)) / slots,
        float(np.sum(replay.gpu_s)) / host.workers,
    )
    jobs = len(replay.job_sizes)
    span_s = replay.arrivals_s[-1]
    arrival = (
        {"kind": "poisson", "jobs": jobs, "jobs_per_hour": 3600.0 * jobs / span_s}
        if span_s > 0 else {"kind": "backlog", "jobs": jobs}
    )  # fmt: skip
    return Scenario.model_validate({
        "name": name,
        "duration_s": span_s + HORIZON_FACTOR * (least_s + syn + gpu),
        "gpu": {"workers": host.workers, "service_s": {"dist": "fixed", "value": gpu}},
        "synthesis": {
            "duration_s": {"dist": "fixed", "value": syn},
            "threads_per_synthesis": host.threads_per_synthesis,
            "cores": host.cores,
            "executor": {"processes": slots, "verify_threads": host.verify_threads},
        },
        "partition": {"bytes": host.partition_bytes},
        "memory": {"budget_bytes": host.budget_bytes},
        "jobs": {
            "partitions_per_job": max(1, round(sum(replay.job_sizes) / jobs)),
            "arrival": arrival,
        },
    })  # fmt: skip


def waiting_busy(raw: RawRun) -> float:
    """The GPUs' busy share of the time partitions waited for dispatch, from the first GPU
    start: busy worker-seconds ÷ live worker-seconds then. A GPU idle then is one the policy
    could have fed; idle before the first partition is ready, after the last dispatch or
    between jobs is the recording's, which no setting changes. 1.0 where nothing waited."""
    trace = raw.trace
    t = np.asarray(trace.t)
    start = math.inf if raw.first_gpu_s is None else raw.first_gpu_s
    weight = np.diff(t) * ((np.asarray(trace.backlog[:-1]) > 0) & (t[:-1] >= start))
    live_s = float(np.sum(np.asarray(trace.workers[:-1]) * weight))
    busy_s = float(np.sum(np.asarray(trace.busy[:-1]) * weight))
    return busy_s / live_s if live_s > 0 else 1.0


def evaluate(recording: Recording, host: HostShape, settings: Settings, seeds: int) -> Outcome:
    """Replay ``recording`` on ``host`` under ``settings`` (the policy they name, with their
    controller settings) once for each of ``seeds`` seeds."""
    busy, memory, peaks, completed = [], [], [], True
    for seed in range(seeds):
        replay = recording.replay(seed)
        scenario = scenario_for(replay, host)
        policy = settings.controller.policy
        factory = policy_factory(policy, scenario, settings)
        raw = Simulation(scenario, policy, factory, replay).run()
        report = summarize(raw)
        busy.append(waiting_busy(raw))
        memory.append(report.mean_inflight_partitions * host.partition_bytes)
        peaks.append(report.peak_inflight_bytes)
        completed &= report.partitions_completed == sum(replay.job_sizes)
    return Outcome(
        busy=float(np.mean(busy)),
        busy_min=float(min(busy)),
        memory_bytes=float(np.mean(memory)),
        peak_bytes=max(peaks),
        completed=completed,
    )
