"""The partitions a simulation runs: drawn from its scenario's distributions, or recorded
(``Replay``, what `pacer tune` runs instead of the draws)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pacer.sim.scenario import Scenario


@dataclass(frozen=True)
class Replay:
    """Partitions to run instead of the scenario's draws: job i arrives at ``arrivals_s[i]``
    with ``job_sizes[i]`` partitions; partition k (in arrival order) takes ``synthesis_s[k]`` of
    synthesis alone and ``gpu_s[k]`` on a GPU, and ``verify_s[k]`` for the CPU check of its
    proof, where it was checked (0 where not; None: no partition was) (s). The scenario still
    gives the host, the disturbances and the end.

    Raises ValueError where the jobs, arrivals and durations do not agree."""

    arrivals_s: tuple[float, ...]
    job_sizes: tuple[int, ...]
    synthesis_s: np.ndarray
    gpu_s: np.ndarray
    verify_s: np.ndarray | None = None

    def __post_init__(self) -> None:
        total = sum(self.job_sizes)
        if len(self.arrivals_s) != len(self.job_sizes) or not self.job_sizes:
            raise ValueError("a replay needs one arrival for each job, and one job at least")
        sizes = [len(self.synthesis_s), len(self.gpu_s)]
        sizes += [] if self.verify_s is None else [len(self.verify_s)]
        if min(self.job_sizes) < 1 or any(n != total for n in sizes):
            raise ValueError(f"a replay needs jobs of 1 partition or more and {total} durations")
        if list(self.arrivals_s) != sorted(self.arrivals_s):
            raise ValueError("a replay's arrivals must be in increasing order")
        if self.verify_s is not None and bool(np.any(np.asarray(self.verify_s) < 0)):
            raise ValueError("a replay's verify_s must be 0 or more")


@dataclass(frozen=True)
class Partitions:
    """What each partition of a run takes (s), in the order of arrival: ``synthesis_work``
    alone on a core's share, ``gpu_base`` on a GPU at the scenario's base speed, ``verify_s``
    for its check on the CPU (0: not checked); and each job's arrival (s) and size."""

    synthesis_work: np.ndarray
    gpu_base: np.ndarray
    verify_s: np.ndarray
    arrivals_s: list[float]
    job_sizes: list[int]

    @property
    def total(self) -> int:
        return len(self.synthesis_work)


def partitions(scenario: Scenario, replay: Replay | None = None) -> Partitions:
    """The partitions of a run of ``scenario``: ``replay``'s where given, else drawn from the
    scenario's seed, each from a stream of its own (so that, e.g., the arrival count never
    shifts the service times) and the same for every policy (common random numbers)."""
    if replay is not None:
        checks = replay.verify_s
        return Partitions(
            np.asarray(replay.synthesis_s, dtype=float), np.asarray(replay.gpu_s, dtype=float),
            np.zeros(len(replay.gpu_s)) if checks is None else np.asarray(checks, dtype=float),
            list(replay.arrivals_s), list(replay.job_sizes),
        )  # fmt: skip
    rng = np.random.default_rng(scenario.seed)
    total = scenario.total_partitions
    syn_rng, gpu_rng, arr_rng, work_rng = rng.spawn(4)
    jobs = scenario.jobs
    scales = np.asarray(jobs.work_scales)
    work_scale = np.repeat(np.resize(scales, jobs.arrival.jobs), jobs.partitions_per_job)
    if jobs.partition_work is not None:
        work_scale = work_scale * jobs.partition_work.sample(work_rng, total)
    arrivals = _arrival_times(scenario, arr_rng)
    return Partitions(
        scenario.synthesis.duration_s.sample(syn_rng, total) * work_scale,
        scenario.gpu.service_s.sample(gpu_rng, total) * work_scale,
        np.zeros(total), arrivals, [jobs.partitions_per_job] * len(arrivals),
    )  # fmt: skip


def _arrival_times(scenario: Scenario, rng: np.random.Generator) -> list[float]:
    arrival = scenario.jobs.arrival
    if arrival.kind == "backlog":
        return [0.0] * arrival.jobs
    if arrival.kind == "bursts":
        return [(i // arrival.per_burst) * arrival.every_s for i in range(arrival.jobs)]
    gaps = rng.exponential(3600.0 / arrival.jobs_per_hour, arrival.jobs)
    return [float(t) for t in np.cumsum(gaps)]
