"""Measurements of a simulation run: the numbers `pacer simulate` prints.

"While work was available" means while at least one accepted partition was not yet complete:
idle periods of a bursty workload count neither for nor against a policy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from pacer.sim.engine import RawRun
from pacer.sim.scenario import Regime, Scenario

STEADY_BUSY = 0.95  # busy ratio over the trailing window that counts as steady
RECOVERED_BUSY = 0.95  # ... and of what the new regime allows, as recovered after a change


@dataclass(frozen=True)
class Recovery:
    """How soon the GPUs were busy again after a disturbance ending at ``at_s``: the first
    time the busy ratio over the trailing ``lead_s`` (the mean synthesis duration after it)
    reached 0.95 of what the new regime allows, ``after_s`` past ``at_s``; None if never."""

    at_s: float
    lead_s: float
    after_s: float | None


@dataclass(frozen=True)
class Report:
    """Metrics of one run; field names are the keys of ``pacer simulate --json``."""

    scenario: str
    policy: str
    backlog: bool  # all jobs waiting at the start (else: Poisson arrivals or bursts)
    gpu_busy_ratio: float
    steady_gpu_busy_ratio: float
    throughput_partitions_per_s: float
    bound_throughput_partitions_per_s: float
    bottleneck: str  # which term of the bound is smallest: gpu, synthesis or memory
    gpu_bound_share: float  # share of the time work was available that the GPUs bound
    peak_inflight_partitions: int
    peak_inflight_bytes: int
    mean_inflight_partitions: float  # time-average while work was available
    little_min_inflight: float  # time-average over the scenario's regimes
    little_max_inflight: float  # the largest of its regimes
    peak_ready: int
    time_to_first_gpu_s: float | None
    time_to_steady_s: float | None
    idle_gap_p99_s: float
    bootstraps: int
    rebootstraps: int
    budget_violations: int
    partitions_completed: int
    simulated_s: float
    recoveries: tuple[Recovery, ...] = ()
    target_gpu_busy_min: float | None = None  # the scenario's own target, if it sets one
    warm_start: bool = False  # pi started from saved estimates (its start is a refill)
    memory_slots: int = 0  # partitions the memory budget holds
    hung_syntheses: int = 0  # syntheses the scenario makes hang

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class Cumulative:
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
    available = np.asarray(tr.available, dtype=float)
    busy = Cumulative(t, np.asarray(tr.busy, dtype=float))
    avail = Cumulative(t, available)
    # Worker-seconds of live workers while work was available: a dead worker is no capacity.
    capacity = Cumulative(t, available * np.asarray(tr.workers, dtype=float))
    held = Cumulative(t, available * np.asarray(tr.inflight, dtype=float))
    end = run.end_s
    avail_total = float(avail(end))

    def busy_ratio(since: float) -> float:
        denom = float(capacity(end) - capacity(since))
        return float(busy(end) - busy(since)) / denom if denom > 0 else 0.0

    steady_from = run.first_arrival_s + 2 * sc.synthesis.duration_s.mean
    gap_lengths = [float(avail(b) - avail(a)) for a, b in run.gaps]
    gap_lengths = [g for g in gap_lengths if g > 0]
    bound, bottleneck = bound_throughput(sc, avail)
    shares = _shares(sc, avail)
    total = sum(share for share, _ in shares)
    gpu_time = sum(share for share, r in shares if min(r.bounds, key=r.bounds.__getitem__) == "gpu")
    little_mean, little_max = _little(sc, avail)
    return Report(
        scenario=sc.name,
        policy=run.policy,
        backlog=sc.jobs.arrival.kind == "backlog",
        gpu_busy_ratio=busy_ratio(0.0),
        steady_gpu_busy_ratio=busy_ratio(steady_from),
        throughput_partitions_per_s=run.completed / avail_total if avail_total > 0 else 0.0,
        bound_throughput_partitions_per_s=bound,
        bottleneck=bottleneck,
        gpu_bound_share=gpu_time / total if total > 0 else 1.0,
        peak_inflight_partitions=run.peak_inflight,
        peak_inflight_bytes=run.peak_inflight * sc.partition.bytes,
        mean_inflight_partitions=float(held(end)) / avail_total if avail_total > 0 else 0.0,
        little_min_inflight=little_mean,
        little_max_inflight=little_max,
        peak_ready=run.peak_ready,
        time_to_first_gpu_s=(
            None if run.first_gpu_s is None else run.first_gpu_s - run.first_arrival_s
        ),
        time_to_steady_s=_time_to_steady(run, busy, avail, capacity),
        idle_gap_p99_s=float(np.percentile(gap_lengths, 99)) if gap_lengths else 0.0,
        bootstraps=run.bootstraps,
        rebootstraps=run.rebootstraps,
        budget_violations=run.budget_violations,
        partitions_completed=run.completed,
        simulated_s=end,
        recoveries=tuple(_recoveries(run, busy, avail, capacity)),
        target_gpu_busy_min=sc.targets.gpu_busy_min,
        warm_start=sc.warm_start is not None,
        memory_slots=sc.memory_slots,
        hung_syntheses=len(sc.synthesis.hangs),
    )


def _shares(sc: Scenario, avail: Cumulative) -> list[tuple[float, Regime]]:
    """Each regime of ``sc`` with the seconds work was available during it."""
    last = float(avail.t[-1])
    out = []
    for regime in sc.regimes():
        if regime.start_s >= last and regime.start_s > 0:
            continue
        share = float(avail(min(regime.stop_s, last)) - avail(regime.start_s))
        out.append((share, regime))
    return out


def bound_throughput(sc: Scenario, avail: Cumulative) -> tuple[float, str]:
    """The throughput no policy can beat (partitions/s) and which resource sets it.

    In each regime (``Scenario.regimes``: GPU and CPU speeds and live workers fixed) the min
    of: GPU capacity W ÷ mean GPU time, synthesis capacity (cores ÷ threads) ÷ mean synthesis
    time, and the memory bound floor(budget ÷ partition bytes) ÷ (mean synthesis + mean GPU
    time); averaged over the time work was available in each. The bottleneck named is the
    resource that bounds for the most of that time.
    """
    shares = _shares(sc, avail)
    total = sum(share for share, _ in shares)
    if total <= 0:
        first = sc.regimes()[0]
        bounds = first.bounds
        name = min(bounds, key=lambda k: bounds[k])
        return bounds[name], name
    bound = sum(share * regime.throughput for share, regime in shares) / total
    time_bound: dict[str, float] = {}
    for share, regime in shares:
        bounds = regime.bounds
        name = min(bounds, key=lambda k: bounds[k])
        time_bound[name] = time_bound.get(name, 0.0) + share
    return bound, max(time_bound, key=lambda k: time_bound[k])


def _little(sc: Scenario, avail: Cumulative) -> tuple[float, float]:
    """Little's-law minimum in flight: its average over the time work was available, and
    its largest value in any regime."""
    shares = [(share, r) for share, r in _shares(sc, avail) if share > 0] or [
        (1.0, sc.regimes()[0])
    ]
    total = sum(share for share, _ in shares)
    mean = sum(share * r.little_min_inflight for share, r in shares) / total
    return mean, max(r.little_min_inflight for _, r in shares)


def _window_ratio(
    busy: Cumulative, avail: Cumulative, capacity: Cumulative, ends: np.ndarray, window: float
) -> tuple[np.ndarray, np.ndarray]:
    """Busy ratio over ``[end − window, end]`` for each end, and whether work was available
    for at least half of that window."""
    worked = busy(ends) - busy(ends - window)
    available = avail(ends) - avail(ends - window)
    cap = capacity(ends) - capacity(ends - window)
    ratio = np.where(cap > 0, worked / np.maximum(cap, 1e-12), 0.0)
    return ratio, available >= window / 2


def _recoveries(
    run: RawRun, busy: Cumulative, avail: Cumulative, capacity: Cumulative
) -> list[Recovery]:
    sc = run.scenario
    out = []
    regimes = sc.regimes()
    for at in sc.disturbances():
        if at >= run.end_s:
            continue
        regime = next(r for r in regimes if r.start_s <= at < r.stop_s)
        lead = regime.synthesis_s
        target = RECOVERED_BUSY * regime.achievable_busy - 1e-12
        t = busy.t
        candidates = np.unique(np.concatenate((t, t + lead)))
        candidates = candidates[(candidates >= at + lead) & (candidates <= run.end_s)]
        after: float | None = None
        if candidates.size:
            ratio, ok = _window_ratio(busy, avail, capacity, candidates, lead)
            hits = np.nonzero(ok & (ratio >= target))[0]
            if hits.size:
                after = float(candidates[hits[0]] - at)
        out.append(Recovery(at, lead, after))
    return out


def _time_to_steady(
    run: RawRun, busy: Cumulative, avail: Cumulative, capacity: Cumulative
) -> float | None:
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
    ratio, ok = _window_ratio(busy, avail, capacity, candidates, window)
    hits = np.nonzero(ok & (ratio >= STEADY_BUSY - 1e-12))[0]
    if hits.size == 0:
        return None
    return float(candidates[hits[0]] - run.first_arrival_s)
