"""Measurements of a simulation run: the numbers `pacer simulate` prints.

"While work was available" means while at least one accepted partition was not yet complete:
idle periods of a bursty workload count neither for nor against a policy.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass

import numpy as np

from pacer.sim.engine import RawRun
from pacer.sim.scenario import Scenario

STEADY_BUSY = 0.95  # busy ratio over the trailing window that counts as steady


@dataclass(frozen=True)
class Report:
    """Metrics of one run; field names are the keys of ``pacer simulate --json``."""

    scenario: str
    policy: str
    backlog: bool  # all jobs waiting at the start (else: Poisson arrivals)
    gpu_busy_ratio: float
    steady_gpu_busy_ratio: float
    throughput_partitions_per_s: float
    bound_throughput_partitions_per_s: float
    bottleneck: str  # which term of the bound is smallest: gpu, synthesis or memory
    peak_inflight_partitions: int
    peak_inflight_bytes: int
    little_min_inflight: float
    peak_ready: int
    time_to_first_gpu_s: float | None
    time_to_steady_s: float | None
    idle_gap_p99_s: float
    bootstraps: int
    rebootstraps: int
    budget_violations: int
    partitions_completed: int
    simulated_s: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class _Cumulative:
    """Integrals of a piecewise-constant trace: value(t) held from t_i until t_{i+1}."""

    def __init__(self, t: np.ndarray, values: np.ndarray) -> None:
        self.t = t
        self.cum = np.concatenate(([0.0], np.cumsum(values[:-1] * np.diff(t))))

    def __call__(self, at: np.ndarray | float) -> np.ndarray:
        return np.asarray(np.interp(at, self.t, self.cum), dtype=float)


def summarize(run: RawRun) -> Report:
    sc = run.scenario
    tr = run.trace
    t = np.asarray(tr.t)
    workers = sc.gpu.workers
    busy = _Cumulative(t, np.asarray(tr.busy, dtype=float))
    avail = _Cumulative(t, np.asarray(tr.available, dtype=float))
    end = run.end_s
    avail_total = float(avail(end))

    def busy_ratio(since: float) -> float:
        denom = workers * float(avail(end) - avail(since))
        return float(busy(end) - busy(since)) / denom if denom > 0 else 0.0

    steady_from = run.first_arrival_s + 2 * sc.synthesis.duration_s.mean
    gap_lengths = [float(avail(b) - avail(a)) for a, b in run.gaps]
    gap_lengths = [g for g in gap_lengths if g > 0]
    bound, bottleneck = bound_throughput(sc, avail)
    return Report(
        scenario=sc.name,
        policy=run.policy,
        backlog=sc.jobs.arrival.kind == "backlog",
        gpu_busy_ratio=busy_ratio(0.0),
        steady_gpu_busy_ratio=busy_ratio(steady_from),
        throughput_partitions_per_s=run.completed / avail_total if avail_total > 0 else 0.0,
        bound_throughput_partitions_per_s=bound,
        bottleneck=bottleneck,
        peak_inflight_partitions=run.peak_inflight,
        peak_inflight_bytes=run.peak_inflight * sc.partition.bytes,
        little_min_inflight=sc.little_min_inflight,
        peak_ready=run.peak_ready,
        time_to_first_gpu_s=(
            None if run.first_gpu_s is None else run.first_gpu_s - run.first_arrival_s
        ),
        time_to_steady_s=_time_to_steady(run, busy, avail),
        idle_gap_p99_s=float(np.percentile(gap_lengths, 99)) if gap_lengths else 0.0,
        bootstraps=run.bootstraps,
        rebootstraps=run.rebootstraps,
        budget_violations=run.budget_violations,
        partitions_completed=run.completed,
        simulated_s=end,
    )


def bound_throughput(sc: Scenario, avail: _Cumulative) -> tuple[float, str]:
    """The throughput no policy can beat (partitions/s) and which resource sets it.

    min of: GPU capacity W ÷ mean GPU time (averaged over the time work was available, so a
    slowdown phase lowers it), synthesis capacity (cores ÷ threads) ÷ mean synthesis time, and
    the memory bound floor(budget ÷ partition bytes) ÷ (mean synthesis + mean GPU time).
    """
    gpu_mean = sc.gpu.service_s.mean
    syn_mean = sc.synthesis.duration_s.mean
    total = float(avail(avail.t[-1]))
    edges = [0.0, *(p.at_s for p in sc.gpu.phases), math.inf]
    gpu_capacity = 0.0
    for start, stop in itertools.pairwise(edges):
        share = float(avail(min(stop, avail.t[-1])) - avail(start))
        gpu_capacity += share * sc.gpu.workers / (gpu_mean * sc.gpu.scale_at(start))
    gpu_bound = gpu_capacity / total if total > 0 else sc.gpu.workers / gpu_mean
    terms = {
        "gpu": gpu_bound,
        "synthesis": sc.synthesis_slots / syn_mean,
        "memory": sc.memory_slots / (syn_mean + gpu_mean),
    }
    name = min(terms, key=lambda k: terms[k])
    return terms[name], name


def _time_to_steady(run: RawRun, busy: _Cumulative, avail: _Cumulative) -> float | None:
    """First time the busy ratio over the trailing window reaches STEADY_BUSY.

    Window: max(60 s, 20 × mean GPU time). The ratio is busy worker-seconds over W × the time
    work was available in the window; a window needs work for at least half its length.
    """
    sc = run.scenario
    window = max(60.0, 20 * sc.gpu.service_s.mean)
    t = busy.t
    start = run.first_arrival_s + window
    candidates = np.unique(np.concatenate((t, t + window)))
    candidates = candidates[(candidates >= start) & (candidates <= run.end_s)]
    if candidates.size == 0:
        return None
    worked = busy(candidates) - busy(candidates - window)
    available = avail(candidates) - avail(candidates - window)
    ok = available >= window / 2
    ratio = np.where(ok, worked / np.maximum(available * sc.gpu.workers, 1e-12), 0.0)
    hits = np.nonzero(ratio >= STEADY_BUSY - 1e-12)[0]
    if hits.size == 0:
        return None
    return float(candidates[hits[0]] - run.first_arrival_s)
