"""Smoothed duration estimates the controller paces by.

GPU service time and synthesis duration are exponentially weighted moving averages; the
synthesis duration also keeps a moving variance, because the spread of synthesis times sets how
much the ready queue wanders. A cold start adds a censored estimate of its first cohort.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Estimates:
    """Smoothed durations (s); None until the first sample. Saved so a restart starts warm."""

    gpu_service_s: float | None = None
    synthesis_s: float | None = None
    synthesis_sd_s: float = 0.0  # standard deviation of one synthesis duration

    @property
    def known(self) -> bool:
        return self.gpu_service_s is not None and self.synthesis_s is not None


def _check(sample: float) -> None:
    if not math.isfinite(sample) or sample < 0:
        raise ValueError(f"a duration must be a finite number of seconds >= 0, got {sample}")


class ColdCohort:
    """The syntheses of a cold start, for a censored estimate of their mean duration.

    All were dispatched before any duration was known; the first to finish are the fastest.
    While some still run, ``(Σ finished + Σ age of those running) ÷ N`` bounds the cohort's
    mean from below, and rises toward it as the cohort completes; once all are in, their mean
    is unbiased. A completion belongs to the cohort when its dispatch time (now − duration)
    matches a cohort dispatch within ``MATCH_S``: later partitions that overtake a slow cohort
    member must not stand in for it, or the mean comes out low.
    """

    MATCH_S = 0.25

    def __init__(self) -> None:
        self._pending: dict[float, int] = {}  # dispatch time → members still running
        self._size = 0
        self._finished: list[float] = []

    def dispatched(self, at: float, count: int) -> None:
        self._pending[at] = self._pending.get(at, 0) + count
        self._size += count

    def completed(self, now: float, seconds: float) -> float | None:
        """Record a finished synthesis; the cohort mean once all members are in, else None."""
        if self._match(now - seconds) is None:
            return None
        self._finished.append(seconds)
        if self._pending:
            return None
        return sum(self._finished) / len(self._finished)

    def failed(self, now: float, seconds: float) -> float | None:
        """A member dispatched ``seconds`` before ``now`` will never finish: it leaves the
        cohort. The cohort mean once the rest are all in, else None."""
        match = self._match(now - seconds)
        if match is None:
            return None
        self._size -= 1
        if self._pending or not self._finished:
            return None
        return sum(self._finished) / len(self._finished)

    def _match(self, origin: float) -> float | None:
        """Take one running member dispatched at ``origin`` (within ``MATCH_S``); its
        dispatch time, or None if there is none."""
        match = min(self._pending, key=lambda at: abs(at - origin), default=None)
        if match is None or abs(match - origin) > self.MATCH_S:
            return None
        self._pending[match] -= 1
        if self._pending[match] == 0:
            del self._pending[match]
        return match

    def lower_bound(self, now: float) -> float:
        if self._size == 0:
            return 0.0
        running = sum(count * (now - at) for at, count in self._pending.items())
        return (sum(self._finished) + running) / self._size


class Estimator:
    """Keeps the estimates up to date from observed durations.

    ``gpu_alpha`` and ``synthesis_alpha`` weigh each new sample (EMA). Until there are 1 ÷ α
    samples, each weighs 1 ÷ n instead (a plain running mean), so the first sample does not
    dominate the estimate for dozens of samples. The variance is the exponentially weighted
    variance with the same weights.
    """

    def __init__(self, gpu_alpha: float, synthesis_alpha: float, saved: Estimates) -> None:
        self.gpu_alpha = gpu_alpha
        self.synthesis_alpha = synthesis_alpha
        self._gpu = saved.gpu_service_s
        self._syn = saved.synthesis_s
        self._syn_var = saved.synthesis_sd_s**2
        self._cohort: ColdCohort | None = None if saved.known else ColdCohort()
        self.version = 0  # bumped by every observation, so derived values can be cached
        # Samples seen; a saved estimate counts as settled.
        settled = 1_000_000
        self._gpu_n = 0 if saved.gpu_service_s is None else settled
        self._syn_n = 0 if saved.synthesis_s is None else settled

    @property
    def gpu_service_s(self) -> float | None:
        return self._gpu

    @property
    def synthesis_s(self) -> float | None:
        return self._syn

    @property
    def estimates(self) -> Estimates:
        return Estimates(self._gpu, self._syn, math.sqrt(self._syn_var))

    @property
    def known(self) -> bool:
        return self._gpu is not None and self._syn is not None

    @property
    def cold_cohort_open(self) -> bool:
        """Some of the cold start's first syntheses are still running."""
        return self._cohort is not None

    def observe_gpu_service(self, seconds: float) -> None:
        _check(seconds)
        self.version += 1
        self._gpu_n += 1
        old = self._gpu
        weight = max(self.gpu_alpha, 1 / self._gpu_n)
        self._gpu = seconds if old is None else old + weight * (seconds - old)

    def observe_synthesis(self, seconds: float, now: float) -> None:
        """A synthesis that took ``seconds`` finished at ``now`` (clock seconds)."""
        _check(seconds)
        self.version += 1
        self._syn_n += 1
        if self._syn is None:
            self._syn = seconds
        else:
            delta = seconds - self._syn
            a = max(self.synthesis_alpha, 1 / self._syn_n)
            self._syn += a * delta
            self._syn_var = (1 - a) * (self._syn_var + a * delta * delta)
        if self._cohort is not None:
            cohort_mean = self._cohort.completed(now, seconds)
            if cohort_mean is not None:
                # The whole cold-start cohort is in: its mean is unbiased, unlike an average
                # of its first (fastest) finishers.
                self._syn = cohort_mean
                self._cohort = None

    def synthesis_failed(self, seconds: float, now: float) -> None:
        """A synthesis dispatched ``seconds`` before ``now`` failed: not a duration sample,
        but a cold-start cohort member that will never finish, so the cohort's censored
        bound must not wait for it (it would grow with its age for ever)."""
        _check(seconds)
        if self._cohort is None:
            return
        self.version += 1
        cohort_mean = self._cohort.failed(now, seconds)
        if cohort_mean is not None:
            self._syn = cohort_mean
            self._cohort = None

    def cold_dispatched(self, at: float, count: int) -> None:
        """Dispatches made before any duration was known."""
        if self._cohort is not None:
            self._cohort.dispatched(at, count)

    def lead_s(self, now: float) -> float:
        """T̂syn, the synthesis lead time (s) the projection looks ahead.

        While the cold-start cohort is still running, at least the cohort's censored mean:
        its first finishers are its fastest, so their average alone runs low and would starve
        the GPUs one synthesis later.
        """
        syn = self._syn or 0.0
        if self._cohort is not None:
            syn = max(syn, self._cohort.lower_bound(now))
        return syn

    def in_synthesis_sd(self, rate_per_s: float) -> float:
        """Standard deviation of the number in synthesis when dispatching at ``rate_per_s``.

        Each partition dispatched ``a`` seconds ago is still in synthesis with probability
        F̄(a), so the count varies by rate × ∫ F̄(1 − F̄) da, which is σ ÷ √π for durations
        spread normally with standard deviation σ. The ready queue wanders by as much.
        """
        return math.sqrt(rate_per_s * math.sqrt(self._syn_var) / math.sqrt(math.pi))
