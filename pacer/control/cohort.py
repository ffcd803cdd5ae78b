"""The cold start's first syntheses, for a censored estimate of their mean duration."""

from __future__ import annotations


class ColdCohort:
    """The syntheses of a cold start, for a censored estimate of their mean duration.

    All were dispatched before any duration was known; the first to finish are the fastest.
    While some still run, ``(Σ finished + Σ age of those running) ÷ N`` bounds the cohort's
    mean from below, and rises toward it as the cohort completes; once all are in, their mean
    is unbiased. A completion belongs to the cohort when its dispatch time (now − duration)
    matches a cohort dispatch within ``MATCH_S``: later partitions that overtake a slow cohort
    member must not stand in for it, or the mean comes out low.

    A member that failed (``failed``), or that is no longer running (``forget_before``: older
    than the oldest synthesis the pipeline still runs), leaves the cohort without a duration,
    so one lost synthesis cannot hold the cohort open, and its bound growing, for ever.
    """

    MATCH_S = 0.25

    def __init__(self) -> None:
        self._pending: dict[float, int] = {}  # dispatch time → members still running
        self._running = 0  # members still running: the sum of _pending's counts
        self._running_since = 0.0  # the sum of their dispatch times
        self._size = 0
        self._finished: list[float] = []
        self._finished_s = 0.0  # the sum of _finished

    @property
    def finished(self) -> list[float]:
        return list(self._finished)

    def dispatched(self, at: float, count: int) -> None:
        self._pending[at] = self._pending.get(at, 0) + count
        self._running += count
        self._running_since += count * at
        self._size += count

    def _leave(self, at: float, count: int) -> None:
        """``count`` members dispatched at ``at`` no longer run."""
        self._running -= count
        self._running_since -= count * at

    def _take(self, origin: float) -> bool:
        match = min(self._pending, key=lambda at: abs(at - origin), default=None)
        if match is None or abs(match - origin) > self.MATCH_S:
            return False
        self._pending[match] -= 1
        self._leave(match, 1)
        if self._pending[match] == 0:
            del self._pending[match]
        return True

    def _mean_if_complete(self) -> float | None:
        if self._pending or not self._finished:
            return None
        return sum(self._finished) / len(self._finished)

    def completed(self, now: float, seconds: float) -> float | None:
        """Record a finished synthesis; the cohort mean once all members are in, else None."""
        if not self._take(now - seconds):
            return None
        self._finished.append(seconds)
        self._finished_s += seconds
        return self._mean_if_complete()

    def failed(self, now: float, seconds: float) -> float | None:
        """A member failed after ``seconds``: it leaves the cohort without a duration.
        The cohort mean if that was the last one running (and some finished), else None."""
        if not self._take(now - seconds):
            return None
        self._size -= 1
        return self._mean_if_complete()

    def forget_before(self, at: float) -> float | None:
        """Members dispatched before ``at`` are no longer running (the oldest synthesis still
        running started at ``at``): they leave the cohort. The cohort mean if none is left
        running (and some finished), else None."""
        gone = [t for t in self._pending if t < at - self.MATCH_S]
        if not gone:
            return None
        for t in gone:
            count = self._pending.pop(t)
            self._size -= count
            self._leave(t, count)
        return self._mean_if_complete()

    def lower_bound(self, now: float) -> float:
        if self._size <= 0:
            return 0.0
        running = self._running * now - self._running_since
        return (self._finished_s + running) / self._size
