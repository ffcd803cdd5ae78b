"""A slowdown of synthesis seen in the syntheses that fail to finish, before any slow one does.

The live floor (``pacer.control.live_floor``) learns a longer lead time from the ages of the
syntheses running: an age grows one second a second, so the floor reaches the new lead time
only a lead time after the change. Completions that do not come say more, sooner.

Each ``SNAPSHOT_LEADS`` × T̂syn, ``SurvivalCheck`` notes the syntheses running that are not hung,
and their ages. ``HORIZON_LEADS`` × T̂syn later it counts how many of them finished. Those
younger than the ``TAIL``-th longest duration in T̂syn's window are tested: the window gives
each one's chance to finish at its age (a censored sample: a synthesis still running took at
least its age); an older one's odds rest on too few samples. Where far fewer finished than
expected (``SIGNIFICANCE`` standard deviations of the count, at least ``MARGIN`` partitions
and ``SHARE`` of those expected; or, at two checks in a row, ``SIGNIFICANCE_LOW`` standard
deviations and ``SHARE_LOW`` of those expected), synthesis has slowed. The factor ``k`` is the
least slowdown that explains what every member did, the older ones too: their work ``k`` times
slower from the first such snapshot on. ``k`` × T̂syn is then a floor on the lead time. The
window is frozen at the first deficit (a reference taken before the change), so the slow samples
that enter it later neither stretch nor mix it. The slowdown ends once the window reaches it,
the window re-bases, a check finds as many finished as expected, or no check confirms it for
``EXPIRE_LEADS`` of its lead times.

A slowdown of twice or less leaves half of the expected completions or more: ``SHARE`` alone
calls it only by chance. ``SHARE_LOW`` at a single check calls a slowdown from a snapshot
taken before it began, so its first factor comes out too small, and calls a heavy tail's runs
of stragglers more often. Two checks in a row, a quarter lead time apart, call it from the
later snapshot. Under a heavy tail the count's noise is wide: a threefold slowdown left a
deficit of about four standard deviations, which one check at ``SIGNIFICANCE`` misses and two
in a row at ``SIGNIFICANCE_LOW`` call.

A hung synthesis costs one expected completion, once: within the margin. A heavy tail
spreads the chances of finishing, and its wider noise raises the bar the deficit must clear.
The observation names only the oldest syntheses (``Observation.SYNTHESIS_AGES``, 64); every
survivor of a snapshot is among them, as nothing dispatched since is as old. Under a heavy
tail the oldest dozen or so are stragglers, each with a small chance to finish within a lead
time at any pace: a snapshot of them alone could not tell a slowdown of three times from the
tail's noise, and the younger members show it.

Where more run than the observation names, a snapshot holds the oldest alone: each is within
a fraction of a lead time of its end, so at ``HORIZON_LEADS`` all of them finish at most paces
and the count shows nothing. Such a snapshot is checked once the reference expects
``PARTIAL_SHARE`` of its members to have finished. The change is then put after the middle of
the last such look that found no deficit (a slowdown that began before the snapshot has aged
its members, and a factor solved from the snapshot's time comes out too large). The early look
is taken only against a settled window, three quarters full (one re-based lately holds the
new level's first, fastest finishers; ``Estimator``), and only where at most ``TAIL`` members
are older than its ``TAIL``-th longest duration: more there means the window has not yet seen
a mode of those running (partitions of several sizes, early in a run).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence

from pacer.control.live_floor import older_than


class Reference:
    """The durations a check compares with: ``ordered`` samples (sorted) and their ``mean``
    (s)."""

    def __init__(self, ordered: Sequence[float], mean: float) -> None:
        self.ordered = ordered
        self.mean = mean

    def frozen(self) -> Reference:
        """A copy that the window's later samples leave as it is."""
        return Reference(tuple(self.ordered), self.mean)

    def survival(self, age_s: float) -> float:
        """The share of the durations longer than ``age_s``."""
        n = len(self.ordered)
        return (n - bisect.bisect_right(self.ordered, age_s)) / n if n else 0.0

    def finish_chance(
        self, age_s: float, horizon_s: float, scale: float = 1.0, change_s: float = -math.inf
    ) -> float:
        """The chance that a synthesis ``age_s`` old finishes within ``horizon_s`` where the
        work runs ``scale`` times slower from ``change_s`` on (s from now; -inf: all along):
        1 − S(done then) ÷ S(done now), where done is the work a synthesis of the reference
        would have done by then."""
        before = self.survival(_done(0.0, age_s, scale, change_s))
        if before <= 0:
            return 1.0
        return 1.0 - self.survival(_done(horizon_s, age_s, scale, change_s)) / before


def _done(at_s: float, age_s: float, scale: float, change_s: float) -> float:
    """The work (s at the reference's pace) done by ``at_s`` (s from now) by a synthesis
    ``age_s`` old now, its work ``scale`` times slower from ``change_s`` on."""
    start = -age_s
    normal = max(0.0, min(at_s, change_s) - start)
    slow = max(0.0, at_s - max(change_s, start))
    return normal + slow / scale


# A snapshot: (taken at, horizon s, age bound of the testable members, member ages, whether
# the oldest alone were listed).
Snapshot = tuple[float, float, float, tuple[float, ...], bool]


class SurvivalCheck:
    """Counts the syntheses that did not finish against the window's expectation.

    >>> check = SurvivalCheck()
    >>> window = sorted([0.9, 1.0, 1.0, 1.1] * 8)  # durations near 1 s, in order
    >>> ages = tuple(0.95 - 0.05 * i for i in range(16))  # 16 running, 0.2 s to 0.95 s old
    >>> check.update(0.0, ages, 0, window, 1.0)
    >>> check.update(1.0, tuple(a + 1.0 for a in ages[:14]), 0, window, 1.0)  # 2 of 16 finished
    >>> round(check.factor, 2), round(check.lead_s, 2)  # 14 still run: 6.67 times slower
    (6.67, 6.67)
    """

    SNAPSHOT_LEADS = 0.25  # a snapshot of the oldest running this often, in lead times
    HORIZON_LEADS = 1.0  # ... checked this many lead times later
    SIGNIFICANCE = 4.5  # a deficit beyond this many standard deviations of the count
    SIGNIFICANCE_LOW = 3.5  # ... or beyond this many, and ``SHARE_LOW``, at two checks in a row
    MARGIN = 2.0  # ... and beyond this many partitions (a hung synthesis is one)
    SHARE = 0.5  # ... and beyond this share of those expected: at least half did not finish
    SHARE_LOW = 0.35  # ... or beyond this share at two checks in a row (``SIGNIFICANCE_LOW``)
    MAX_FACTOR = 10.0  # the slowdown is believed up to this factor
    SOLVE_STEPS = 12  # bisections of log(factor)
    DUE_STEPS = 8  # bisections of a short look's horizon
    SAMPLES = 32  # no check before the window holds this many durations
    TAIL = 8  # a member's odds come from at least this many durations longer than its age
    EXPIRE_LEADS = 2.0  # a slowdown no check confirmed for this many of its lead times ends
    PARTIAL_SHARE = 0.5  # a snapshot of the oldest alone is checked once this share is due

    def __init__(self) -> None:
        # (taken at, horizon s, age bound of the testable, member ages, oldest alone)
        self._pending: deque[Snapshot] = deque()
        self._last_snapshot = -math.inf
        self._reference: Reference | None = None
        self._last_deficit = -math.inf
        self._change_at = -math.inf  # when the slowdown began, by the first deficit
        self._last_clean = -math.inf  # the change came after this, by the checks that found none
        self._leaning = False  # the last check found a lesser deficit (past the lesser bar)
        self.factor = 1.0  # the slowdown found so far (1: none)
        self.checks = 0  # checks made
        self.deficits = 0  # checks that found a slowdown

    @property
    def lead_s(self) -> float:
        """``factor`` × the reference's mean duration (s); 0 outside a slowdown."""
        if self._reference is None:
            return 0.0
        return self.factor * self._reference.mean

    def clear(self) -> None:
        """The window re-based: it holds the new level; the episode and snapshots end."""
        self._pending.clear()
        self._reference = None
        self._leaning = False
        self.factor = 1.0

    def update(
        self,
        now: float,
        ages_s: tuple[float, ...],
        hung: int,
        window: Sequence[float],
        estimate_s: float,
        partial: bool = False,
    ) -> None:
        """The oldest syntheses running are ``ages_s`` old (oldest first; at most a few,
        every survivor of a snapshot among them), the first ``hung`` of them hung; more run
        than these where ``partial``, and T̂syn's window is settled enough to look at a
        snapshot of the oldest alone early. The window holds ``window`` (sorted) with mean
        ``estimate_s``: check the snapshots due, and take one where due."""
        if estimate_s <= 0 or len(window) < self.SAMPLES:
            return
        reference = self._reference
        if reference is not None and (
            estimate_s >= self.lead_s or now - self._last_deficit > self.EXPIRE_LEADS * self.lead_s
        ):
            self.clear()  # the window has caught up with the slowdown, or no check confirms it
            reference = None
        base = reference.mean if reference is not None else estimate_s
        while self._pending and now - self._pending[0][0] >= self._pending[0][1]:
            self._check(now, ages_s, self._pending.popleft(), window, estimate_s)
        if now - self._last_snapshot >= self.SNAPSHOT_LEADS * base:
            self._snapshot(now, ages_s[hung:], window, base, partial)

    def _snapshot(
        self,
        now: float,
        members: tuple[float, ...],
        window: Sequence[float],
        base_s: float,
        partial: bool,
    ) -> None:
        self._last_snapshot = now
        reference = self._reference or Reference(window, base_s)
        # Those older than all but the TAIL longest durations: too few samples tell their
        # odds at the reference's pace; they count only in the size of a slowdown.
        bound = reference.ordered[max(0, len(reference.ordered) - self.TAIL)]
        if not members or members[-1] >= bound:
            return
        horizon = self.HORIZON_LEADS * base_s
        untested = older_than(members, bound)
        # More than a few members beyond the reference's durations: it does not describe
        # those running (a mode the window has not seen yet), and a short look would call it.
        partial = partial and untested <= self.TAIL
        if partial:
            horizon = self._due(reference, members[untested:], horizon)
        self._pending.append((now, horizon, bound, members, partial))

    def _due(self, reference: Reference, members: Sequence[float], horizon_s: float) -> float:
        """The time (s) by which the reference expects ``PARTIAL_SHARE`` of ``members`` to
        finish, at most ``horizon_s``: bisection of the expected count, to 1/256 of it."""
        alive = [(a, s) for a in members if (s := reference.survival(a)) > 0]
        target = self.PARTIAL_SHARE * len(members) - (len(members) - len(alive))

        def left(after_s: float) -> float:  # members expected to run still after after_s
            return sum(reference.survival(a + after_s) / s for a, s in alive)

        if len(alive) - left(horizon_s) <= target:
            return horizon_s
        low, high = 0.0, horizon_s
        for _ in range(self.DUE_STEPS):
            mid = (low + high) / 2
            low, high = (mid, high) if len(alive) - left(mid) < target else (low, mid)
        return high

    def _check(
        self,
        now: float,
        ages_s: tuple[float, ...],
        snapshot: Snapshot,
        window: Sequence[float],
        estimate_s: float,
    ) -> None:
        taken, horizon, bound, members, partial = snapshot
        elapsed = now - taken
        # The members are now elapsed older; no synthesis dispatched since is that old.
        tiny = 1e-9 * max(1.0, elapsed + members[0])
        since = older_than(ages_s, members[-1] + elapsed - tiny)
        # Those older than the oldest member were hung at the snapshot: none of its members.
        oldest = older_than(ages_s, members[0] + elapsed + tiny)
        alive = since - max(oldest, older_than(ages_s, bound + elapsed - tiny))
        testable = members[older_than(members, bound - tiny) :]
        finished = len(testable) - alive
        reference = self._reference or Reference(window, estimate_s)
        chances = [reference.finish_chance(a, elapsed) for a in testable]
        expected = sum(chances)
        spread = math.sqrt(sum(p * (1 - p) for p in chances))
        self.checks += 1
        deficit = expected - finished
        bar = max(self.SIGNIFICANCE * spread, self.MARGIN, self.SHARE * expected)
        low = max(self.SIGNIFICANCE_LOW * spread, self.MARGIN, self.SHARE_LOW * expected)
        lesser = deficit > low
        leaning, self._leaning = self._leaning, lesser
        if deficit <= bar and not (lesser and leaning):
            # A short look misses a change late in its horizon: after its middle, then.
            self._last_clean = taken + 0.5 * horizon if partial else now
            if self._reference is not None and deficit <= max(spread, 1.0) < expected:
                self.clear()  # as many finished as the reference expects: the episode is over
            return
        self.deficits += 1
        self._last_deficit = now
        if self._reference is None:
            # The first deficit: the change came within its horizon, or for a short look after
            # the last that found none; at the earliest, the least slowdown explains the count.
            self._reference = reference.frozen()
            self._change_at = min(taken, self._last_clean) if partial else taken
        # Its size from every member: one older than the reference's durations that still
        # runs is the plainest sign of how slow synthesis has become.
        finished_all = len(members) - (since - oldest)
        factor = self._solve(reference, members, elapsed, finished_all, self._change_at - taken)
        self.factor = max(self.factor, factor)

    def _solve(
        self,
        reference: Reference,
        members: tuple[float, ...],
        elapsed: float,
        finished: int,
        change_s: float,
    ) -> float:
        """The slowdown from ``change_s`` (s after the snapshot) under which ``finished`` of
        the ``members`` finish within ``elapsed``: the count expected falls as the slowdown
        grows; bisection of its log."""
        target = max(finished, 0.5)  # none finished: half a partition, not an infinite scale
        low, high = 0.0, math.log(self.MAX_FACTOR)
        for _ in range(self.SOLVE_STEPS):
            mid = (low + high) / 2
            scale = math.exp(mid)
            expected = sum(reference.finish_chance(a, elapsed, scale, change_s) for a in members)
            low, high = (mid, high) if expected > target else (low, mid)
        return math.exp((low + high) / 2)
