"""Dispatch by rate within the synthesis caps: how many partitions go out now, and when next.

A rate (1 ÷ interval) is turned into dispatches by credit: it grows by rate × elapsed time,
and every whole partition of it is due at once (no ceiling per call: a wide host dispatches
thousands a second). The synthesis caps bound what goes out: syntheses at once (the
synthesis processes, and a small queue in front of them: `executor_queue`), partitions in
flight, the pinned pool, the bytes left in the memory budget, and a token bucket of the
synthesis rate cap (its burst: the concurrency cap). Only what can start is dispatched, so
only that spends tokens and credit; what a cap holds back is not saved up for a burst.
"""

from __future__ import annotations

import math

from pacer.control.policy import Caps, Decision, Observation

QUEUE_SIGMAS = 2.0  # the queue covers this many standard deviations of bunched ends


def executor_queue(processes: int, cv: float, sigmas: float, in_transit: float = 0.0) -> int:
    """Partitions to keep waiting in front of ``processes`` synthesis processes, so that a
    process that ends finds its next partition there (docs/decisions/controller.md, D168,
    D200).

    The hand-off is covered by the partitions it keeps on their way, ``in_transit`` (the
    processes' rate × the trip from a synthesis's end through the service to the next
    dispatch's arrival), rounded up, at least one; ``sigmas`` standard deviations of the ends
    that bunch up cover the rest: over one synthesis time, ``processes`` renewals whose
    durations spread by ``cv`` (standard deviation over mean) end ``cv·√processes`` apart from
    their mean count. At most one for each process; none where ``sigmas`` is 0. Raises
    ValueError for a negative input.

    >>> executor_queue(16, 0.2, 2.0), executor_queue(16, 1.3, 2.0), executor_queue(16, 0.2, 0)
    (3, 12, 0)
    >>> executor_queue(8, 0.05, 2.0, in_transit=2.4)  # 8 a second, a 0.3 s hand-off
    4
    """
    if processes < 1 or cv < 0 or sigmas < 0 or in_transit < 0:
        raise ValueError(
            f"executor_queue needs processes >= 1 and cv, sigmas and in_transit >= 0, got "
            f"{processes}, {cv}, {sigmas}, {in_transit}"
        )
    if sigmas == 0:
        return 0
    handoff = max(1, math.ceil(in_transit - 1e-9))
    return min(processes, handoff + math.ceil(sigmas * cv * math.sqrt(processes)))


class RateDispatch:
    """Credit and tokens of one controller.

    Five partitions fell due in 2 s at 2 a second (and one of credit), but the concurrency
    cap's burst is 4, and the rate cap of 2 syntheses a second gives the next token in 0.5 s:

    >>> d = RateDispatch(Caps(synthesis_concurrency=4, inflight_partitions=10))
    >>> d.elapse(0.0, rate_cap_per_s=2.0)
    >>> d.paced(0.0, room=10, interval_s=0.5, credit_dt=2.0, headroom=10, floor_s=0.001)
    Decision(dispatch=4, next_at=0.5)
    """

    def __init__(self, caps: Caps) -> None:
        self._caps = caps
        self._credit = 1.0
        self._credit_at: float | None = None
        self.tokens = float(caps.synthesis_concurrency)
        self._rate_cap_per_s = math.inf
        self.queue = 0  # partitions allowed to wait for a synthesis process (`executor_queue`)

    def elapse(self, dt: float, rate_cap_per_s: float) -> None:
        """``dt`` seconds passed since the last decision: tokens come back at the rate cap."""
        self._rate_cap_per_s = rate_cap_per_s
        if dt == 0.0 and self.tokens >= 1:
            return
        burst = float(self._caps.synthesis_concurrency)
        infinite = math.isinf(rate_cap_per_s)
        self.tokens = burst if infinite else min(burst, self.tokens + rate_cap_per_s * dt)

    def credit_dt(self, now: float) -> float:
        """Seconds since the last decision's credit was counted (0 the first time)."""
        dt = 0.0 if self._credit_at is None else max(0.0, now - self._credit_at)
        self._credit_at = now
        return dt

    def hold(self) -> None:
        """Outside pacing: no burst is saved up for later."""
        self._credit = min(self._credit, 1.0)

    def room(self, obs: Observation, stuck: int = 0) -> int:
        """Partitions that can start now: the caps (syntheses at once and ``queue`` waiting for
        a process, in flight), the backlog, the pinned pool and the bytes the memory budget has
        left. Only these are paid for, with tokens and credit: what the budget would refuse is
        held back like any cap's. ``stuck``: syntheses of ``obs.synthesizing`` hung past any
        the host was seen to finish (`LiveFloor.stuck`). Where syntheses share the cores (no
        ``synthesis_queue``), such a one computes nothing and takes no core; where each holds
        a synthesis process, it keeps its process (D211, D213)."""
        running = obs.synthesizing - (0 if self._caps.synthesis_queue else stuck)
        room = min(
            self._caps.synthesis_concurrency + self.queue - running,
            self._caps.inflight_partitions - obs.inflight,
            obs.backlog,
        )
        for free in (obs.pool_free, obs.budget_free):
            if free is not None:
                room = min(room, free)
        return max(0, room)

    def take(self, count: int) -> None:
        """``count`` partitions dispatched: they spend synthesis tokens."""
        self.tokens -= count

    def token_wait_s(self) -> float:
        """Seconds until the rate cap lets one more synthesis start."""
        return max(0.0, 1 - self.tokens) / self._rate_cap_per_s

    def paced(
        self,
        now: float,
        room: int,
        interval_s: float,
        credit_dt: float,
        *,
        headroom: int,
        floor_s: float,
        at_once: int = 0,
    ) -> Decision:
        """Dispatch what is due by rate: 1 ÷ ``interval_s`` partitions a second, as many at
        once as fell due since the last call (a late wake-up, or a rate above the wake-ups),
        and at least ``at_once``, within the caps and the ``headroom`` left below the skip
        threshold. What a cap or the headroom holds back is not saved up for a burst.
        ``floor_s``: the shortest wait before asking again."""
        rate = 1 / interval_s if interval_s > 0 else math.inf
        self._credit = math.inf if math.isinf(rate) else self._credit + rate * credit_dt
        due = int(min(self._credit, float(2**31)))
        count = max(0, min(max(due, at_once), room, int(self.tokens), headroom))
        if count > 0:
            self.take(count)
            self._credit = max(0.0, self._credit - count)
        if count < due:
            self._credit = min(self._credit, 1.0)
        if headroom > 0 and room > 0 and self.tokens < 1:
            return Decision(count, now + max(self.token_wait_s(), floor_s))
        if math.isinf(rate):
            return Decision(count, None)
        if count < due:
            # Held back by a cap or the headroom: the next pipeline event (a completion) asks
            # again; the timer only backs it up, an interval from now.
            return Decision(count, now + max(interval_s, floor_s))
        wait = max(0.0, 1 - self._credit) / rate
        return Decision(count, now + max(wait, floor_s))
