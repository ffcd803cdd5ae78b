"""Whether the journal takes writes, how a failing write is retried, and which journal call
has run too long.

Plain code on an injected clock: the service reports each write's outcome
(`JournalHealth.failed`, `JournalHealth.succeeded`) and asks when to try again
(`Backoff.delay_s`); the journal's threads report each call as it begins and ends
(`JournalCalls`), so that a call that never returns (a hung disk or mount, a database that does
not answer) is seen although it raises nothing. Readiness, the refusal of new jobs and the
metrics read the state.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

LOG_REPEAT_S = 60.0


class JournalUnavailable(Exception):  # noqa: N818 - a domain name, like PoolExhausted
    """The journal cannot record what this request needs (the API answers 503 with it)."""


class JournalLeft(JournalUnavailable):
    """A stop no longer waits for the journal: a call on its thread ran past the stop's bound,
    or a signal cut the wait short. Not a failure of the journal: nothing is counted or
    retried, and the stop logs the call once."""


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


@dataclass(frozen=True)
class RunningCall:
    """A journal call running on ``thread`` since ``began`` (clock time)."""

    name: str
    thread: str
    began: float


class JournalCalls:
    """The journal calls running now, one per journal thread, and those that have run past
    ``stall_s`` without returning.

    The thread running a call reports `began` and `ended`; readiness, the metrics and the
    status read from the event loop (a lock keeps them apart). `stalled` hands each call past
    the limit out once, for its log line.

    >>> t = [0.0]
    >>> calls = JournalCalls(lambda: t[0], stall_s=30.0)
    >>> calls.began("complete_partitions")
    >>> t[0] = 29.0
    >>> calls.reasons(), calls.longest_s()
    ([], 29.0)
    >>> t[0] = 31.0
    >>> calls.reasons()
    ['journal call complete_partitions running for 31 s (more than 30 s)']
    >>> [(call.name, round(running_s)) for call, running_s in calls.stalled()], calls.stalled()
    ([('complete_partitions', 31)], [])
    >>> calls.ended()  # how long it ran, and whether `stalled` had handed it out
    (31.0, True)
    >>> calls.longest_s(), calls.reasons()
    (0.0, [])
    """

    def __init__(self, clock: Callable[[], float], stall_s: float) -> None:
        if not stall_s > 0:
            raise ValueError(f"stall_s must be greater than 0, got {stall_s}")
        self._clock = clock
        self.stall_s = stall_s
        self._running: dict[int, RunningCall] = {}  # by thread id
        self._reported: set[int] = set()  # threads whose running call `stalled` handed out
        self._lock = threading.Lock()

    def began(self, name: str) -> None:
        """The calling thread begins the journal call ``name``."""
        ident = threading.get_ident()
        call = RunningCall(name, threading.current_thread().name, self._clock())
        with self._lock:
            self._running[ident] = call
            self._reported.discard(ident)

    def ended(self) -> tuple[float, bool] | None:
        """The calling thread's call returned (or raised). If it ran past ``stall_s``: how long
        it ran (s), and whether `stalled` had handed it out; else None."""
        ident = threading.get_ident()
        with self._lock:
            call = self._running.pop(ident, None)
            reported = ident in self._reported
            self._reported.discard(ident)
        if call is None:
            return None
        ran_s = self._clock() - call.began
        return (ran_s, reported) if ran_s >= self.stall_s else None

    def running(self) -> list[tuple[RunningCall, float]]:
        """Each call running now, with how long it has run (s), the longest first."""
        now = self._clock()
        with self._lock:
            calls = list(self._running.values())
        return sorted(((call, now - call.began) for call in calls), key=lambda c: -c[1])

    def longest_s(self) -> float:
        """How long the longest running call has run (s); 0 when none runs."""
        running = self.running()
        return running[0][1] if running else 0.0

    def stalled(self) -> list[tuple[RunningCall, float]]:
        """The calls past ``stall_s`` not handed out before, with how long they have run."""
        now = self._clock()
        with self._lock:
            fresh = [
                (ident, call) for ident, call in self._running.items()
                if now - call.began >= self.stall_s and ident not in self._reported
            ]  # fmt: skip
            self._reported.update(ident for ident, _ in fresh)
        return [(call, now - call.began) for _, call in fresh]

    def reasons(self) -> list[str]:
        """The readiness source's answer: each call past ``stall_s``."""
        return [
            f"journal call {call.name} running for {running_s:.0f} s (more than {self.stall_s:g} s)"
            for call, running_s in self.running()
            if running_s >= self.stall_s
        ]
