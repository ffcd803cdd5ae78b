"""Recorded partitions a simulation runs instead of its scenario's draws (``pacer tune``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Replay:
    """Partitions to run instead of the scenario's draws: job i arrives at ``arrivals_s[i]``
    with ``job_sizes[i]`` partitions; partition k (in arrival order) takes ``synthesis_s[k]`` of
    synthesis alone and ``gpu_s[k]`` on a GPU (s). The scenario still gives the host, the
    disturbances and the end."""

    arrivals_s: tuple[float, ...]
    job_sizes: tuple[int, ...]
    synthesis_s: np.ndarray
    gpu_s: np.ndarray

    def __post_init__(self) -> None:
        total = sum(self.job_sizes)
        if len(self.arrivals_s) != len(self.job_sizes) or not self.job_sizes:
            raise ValueError("a replay needs one arrival for each job, and one job at least")
        if min(self.job_sizes) < 1 or len(self.synthesis_s) != total or len(self.gpu_s) != total:
            raise ValueError(f"a replay needs jobs of 1 partition or more and {total} durations")
        if list(self.arrivals_s) != sorted(self.arrivals_s):
            raise ValueError("a replay's arrivals must be in increasing order")
