"""Whether the journal takes writes, and how a failing write is retried.

Pure and clock-injected: the service reports each write's outcome (`JournalHealth.failed`,
`JournalHealth.succeeded`) and asks when to try again (`Backoff.delay_s`); readiness, the
refusal of new jobs and the metrics read the state.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

LOG_REPEAT_S = 60.0


class JournalUnavailable(Exception):  # noqa: N818 - a domain name, like PoolExhausted
    """The journal cannot record what this request needs (the API answers 503 with it)."""


@dataclass(frozen=True)
class Backoff:
    """Delays between attempts at a failing journal write (s): ``first_s`` after the first
    failure, doubling with each failure up to ``max_s``, each shortened at random by up to the
    fraction ``jitter``.

    >>> [Backoff(jitter=0).delay_s(n) for n in (1, 2, 3, 7, 8, 50)]
    [0.05, 0.1, 0.2, 3.2, 5.0, 5.0]
    """

    first_s: float = 0.05
    max_s: float = 5.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if not 0 < self.first_s <= self.max_s:
            raise ValueError(
                f"first_s must be > 0 and at most max_s ({self.max_s}), got {self.first_s}"
            )
        if not 0 <= self.jitter < 1:
            raise ValueError(f"jitter must be from 0 to below 1, got {self.jitter}")

    def delay_s(self, failures: int, draw: Callable[[], float] = random.random) -> float:
        """The wait after ``failures`` failures in a row (>= 1); ``draw`` gives [0, 1)."""
        if failures < 1:
            raise ValueError(f"failures must be >= 1, got {failures}")
        base = min(self.max_s, self.first_s * 2.0 ** min(failures - 1, 64))
        return base * (1.0 - self.jitter * draw())


class JournalHealth:
    """Whether the journal's last write went through; if not, since when it fails and why.

    ``failures`` counts every failed write (a counter, for the metrics). A failure is worth a
    log line when it starts a failing spell, and then once every ``log_every_s``.

    >>> t = [0.0]
    >>> health = JournalHealth(lambda: t[0])
    >>> health.failed("database or disk is full"), health.healthy
    (True, False)
    >>> t[0] = 12.0
    >>> health.failed("database or disk is full"), health.reason()
    (False, 'journal failing for 12 s: database or disk is full')
    >>> health.succeeded()
    12.0
    >>> health.healthy, health.failures
    (True, 2)
    """

    def __init__(self, clock: Callable[[], float], log_every_s: float = LOG_REPEAT_S) -> None:
        self._clock = clock
        self._log_every_s = log_every_s
        self.failing_since: float | None = None
        self.error: str | None = None
        self.failures = 0
        self.failures_in_spell = 0
        self._logged_at = -math.inf

    @property
    def healthy(self) -> bool:
        return self.failing_since is None

    def failing_s(self) -> float:
        """How long the journal has been failing (s); 0 while healthy."""
        return 0.0 if self.failing_since is None else self._clock() - self.failing_since

    def reason(self) -> str | None:
        """Why the journal is not taking writes, for /readyz and 503s; None while healthy."""
        if self.failing_since is None:
            return None
        return f"journal failing for {self.failing_s():.0f} s: {self.error}"

    def reasons(self) -> list[str]:
        """The readiness source's answer: the reason while failing, else none."""
        reason = self.reason()
        return [] if reason is None else [reason]

    def failed(self, error: str) -> bool:
        """A write failed with ``error``. True if this is worth a log line: the first failure
        of a spell, a new error, or the first after ``log_every_s`` of silence."""
        now = self._clock()
        self.failures += 1
        self.failures_in_spell += 1
        if self.failing_since is None:
            self.failing_since = now
        changed = error != self.error
        self.error = error
        if changed or now - self._logged_at >= self._log_every_s:
            self._logged_at = now
            return True
        return False

    def succeeded(self) -> float | None:
        """A write went through. How long the journal had been failing (s), or None if it
        was not."""
        if self.failing_since is None:
            return None
        spell = self._clock() - self.failing_since
        self.failing_since = None
        self.error = None
        self.failures_in_spell = 0
        self._logged_at = -math.inf
        return spell
