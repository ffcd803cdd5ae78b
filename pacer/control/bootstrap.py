"""How the pipeline starts, and starts again: the cold bootstrap, refills after a drain, the
warm start.

A cold start knows nothing but the caps: it dispatches ``depth`` partitions at once and, as
soon as GPU and synthesis times are known, tops the pipeline up to the Little's-law depth. A
true drain (nothing ready, in synthesis or on a GPU for a while, and work waiting) refills at
once to the Little's-law depth from the estimates; the next drain is armed only once a refill
has reached a GPU. A start from saved estimates is such a refill, at least as deep as a cold
start would dispatch. The controller (``pacer.control.controller``) decides when; this keeps count.
"""

from __future__ import annotations

import math

from pacer.control.policy import Caps, Decision, Observation
from pacer.control.rate_dispatch import RateDispatch


class Bootstrap:
    """The starts of one controller: counts, hysteresis, and the refill under way.

    >>> b = Bootstrap(Caps(synthesis_concurrency=48, inflight_partitions=50), warm=False)
    >>> b.depth(setting=0)  # every synthesis slot, within 90 % of the memory cap
    45
    """

    BOOTSTRAP_SHARE = 0.9
    HOLD_LEADS = 1.25  # the hold is bounded by the GPUs' take over this many cohort ages
    HOLD_LITTLE = 2.0  # ... and by this many times the Little's-law depth (D219)
    BLOCKED_RECHECK_S = 1.0  # while a refill waits for a cap to free, ask again at least this often

    def __init__(self, caps: Caps, *, warm: bool) -> None:
        self._caps = caps
        self.bootstraps = 0  # cold bootstraps
        self.rebootstraps = 0  # refills after a drain (a warm start is one)
        self._booted = False  # a cold bootstrap has been started
        self._cold_refill_due = False  # refill once the cold start has its first estimates
        self._warm_start_due = warm
        self._refill_left = 0  # partitions a refill still has to dispatch
        # Hysteresis: the pipeline must have been empty this long, and a refill must have
        # reached a GPU before the next one can fire.
        self._empty_since: float | None = -math.inf
        self._rearmed = True

    def depth(self, setting: int) -> int:
        """Partitions a cold start dispatches at once and holds in flight until its first
        syntheses are all in: ``setting``, or (0) every synthesis the cores run at once,
        within ``BOOTSTRAP_SHARE`` of the memory cap.

        The GPUs wait one synthesis whatever a cold start dispatches; what it dispatches must
        then carry them through the second lead time, the first one dispatch can be informed
        for. Only the caps are known, so it takes nearly all they allow: a synthesis slot
        left empty through the first lead time is throughput lost where synthesis bounds."""
        if setting > 0:
            return setting
        memory = int(self._caps.inflight_partitions * self.BOOTSTRAP_SHARE)
        return max(1, min(self._caps.synthesis_concurrency, memory))

    def track(self, obs: Observation, now: float) -> None:
        """Follow the pipeline: since when it is empty, and whether a refill reached a GPU."""
        if obs.inflight > 0:
            self._empty_since = None
        elif self._empty_since is None:
            self._empty_since = now
        if obs.gpu_busy > 0:
            self._rearmed = True

    def drained(self, obs: Observation, now: float, hold_s: float) -> bool:
        """Empty for ``hold_s`` at least, and armed: time for a refill."""
        return (
            obs.inflight == 0
            and self._rearmed
            and self._empty_since is not None
            and now - self._empty_since >= hold_s
        )

    def started(self) -> None:
        """Pacing took over: the start, warm or cold, is behind us."""
        self._warm_start_due = False

    def cold(self, obs: Observation, room: int, depth: int) -> int:
        """Partitions a cold start dispatches now (the first call starts the bootstrap)."""
        if obs.backlog == 0:
            return 0
        if not self._booted:
            self._booted = True
            self._cold_refill_due = True
            self.bootstraps += 1
        return max(0, min(room, depth - obs.inflight))

    @property
    def cold_refill_due(self) -> bool:
        """The cold start waits for its first estimates to top the pipeline up."""
        return self._cold_refill_due

    def top_up(self, little_depth: int, inflight: int) -> None:
        """The cold start has its first estimates: refill to ``little_depth`` partitions in
        flight, ``inflight`` of them there already."""
        self._cold_refill_due = False
        self._refill_left = max(0, little_depth - inflight)

    def refilling(self, obs: Observation) -> bool:
        """True while a refill has partitions left and work waits. Otherwise the refill ends
        and its rest is dropped."""
        if self._refill_left > 0 and obs.backlog > 0:
            return True
        self._refill_left = 0
        return False

    def hold_depth(self, obs: Observation, room: int, depth: int, rate: RateDispatch) -> int:
        """Partitions to dispatch now to hold ``depth`` in flight, used until the cold start's
        first syntheses are all in. Their lead time is known only from below until then; the
        depth feeds the GPUs through it whatever the estimate says."""
        count = min(room, depth - obs.inflight, int(rate.tokens))
        if count > 0:
            rate.take(count)
        return count

    def restart(self, little_depth: int, depth: int) -> None:
        """A refill after a drain, to ``little_depth``. Saved estimates count as a few
        samples, not as certainty: a warm start refills at least to the cold ``depth``, in
        case they describe another regime."""
        self.rebootstraps += 1
        self._rearmed = False
        self._refill_left = little_depth
        if self._warm_start_due:
            self._warm_start_due = False
            self._refill_left = max(little_depth, depth)

    def refill(self, now: float, room: int, rate: RateDispatch, floor_s: float) -> Decision:
        """Dispatch the rest of a refill at once, as fast as the caps and the pool allow."""
        count = max(0, min(room, self._refill_left, int(rate.tokens)))
        if count > 0:
            self._refill_left -= count
            rate.take(count)
        if self._refill_left == 0:
            return Decision(count, None)
        if rate.tokens < 1:  # the synthesis rate cap: tokens come back with time
            return Decision(count, now + max(rate.token_wait_s(), floor_s))
        # A cap is full: a completion frees it, and the pipeline asks again then; the timer
        # only backs that up (asking every millisecond meanwhile was a busy loop).
        return Decision(count, now + self.BLOCKED_RECHECK_S)
