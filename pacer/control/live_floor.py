"""A floor on the synthesis lead time from the ages of the syntheses running, and the hung ones.

Completions show a slowdown of synthesis a lead time late, when the slow ones finish; the ages
of the syntheses still running show it at once. ``LiveFloor`` follows one of the oldest
syntheses that are not hung: the ``RANK``-th oldest, or deeper where many run, at the
``SHARE`` of those running. A slowdown ages the whole tail of the syntheses running, a hang
only the few that hung; so hangs up to that share of the syntheses running leave the floor
where it was, however long they take to be told as hung. Those running are counted as they
are now, but no more than the most seen when the margin's reference was taken: after a
slowdown more are sent, and a rank that grew with them would see the slowdown later.

The floor compares that age with T̂syn, the windowed mean, and keeps the excess (age − T̂syn)
seen at its highest over the last ``HISTORY_LEADS`` lead times, or over ``history_longest`` of
the longest syntheses the window holds where that is longer (``live_floor_longest``): the
margin by which the oldest syntheses outrun T̂syn on this host. The floor is the age less that
margin.

It does the same twice as deep (the synthesis at twice its rank, with its own margin), and
rises no further than ``DEEP_SLACK`` × T̂syn above what that one says. A slowdown ages both
alike, and the floor follows it as before; hung syntheses or a cluster of stragglers that
outnumber the rank, but not twice the rank, leave the deeper one where it was, and hold the
floor near it until they are told as hung or finish. Under a heavy tail that is long: the gap
test below waits for half again the longest synthesis the window holds.

The margin is a reference taken before the change: only the excesses of slots older than
``GUARD_LEADS`` lead times count. The first slowed syntheses to complete raise T̂syn's window
and its spread at once; a margin drawn from that window would grow with the age it is taken
from, and the floor would cancel itself. The guard counts in the lead time the floor raises,
so while it rises the ages that raised it never enter its reference.

A synthesis older than ``HUNG_FACTOR`` × T̂syn is hung: it will not deliver in any lead time
the projection looks at. The controller leaves it out of the syntheses it counts, and the
floor out of its ranks, so a few hung syntheses neither hold the lead time up nor hold memory
for what they will never bring. Where the floor would follow one of them sooner (as many hang
as the rank), they are told as hung by the gap behind them: older than twice T̂syn and half
again the longest synthesis the window holds, while the syntheses the rank behind them are no
older than that longest, and a ratio younger (where every synthesis running is listed and
fewer run behind them, the youngest). A slowdown ages every synthesis running alike and leaves
no such gap.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections import deque
from collections.abc import Sequence

from pacer.control.policy import AgesView


def older_than(ages_s: Sequence[float], limit_s: float) -> int:
    """How many of ``ages_s`` (oldest first) exceed ``limit_s``, by bisection.

    >>> older_than((9.0, 5.0, 3.0, 1.0), 4.0)
    2
    """
    if isinstance(ages_s, AgesView):
        return ages_s.older_than(limit_s)  # by the starts, without computing an age
    return bisect.bisect_left(ages_s, -limit_s, key=operator.neg)


class LiveFloor:
    """The live floor of one estimator (s), and the hung syntheses it leaves out.

    >>> f = LiveFloor()
    >>> for t in range(0, 40):  # steady: the 4th oldest runs 1 s past a 10 s estimate
    ...     f.update(float(t), (12.0, 11.5, 11.2, 11.0, 10.5), 10.0, 10.0)
    >>> round(f.value_s, 6), f.hung
    (10.0, 0)
    >>> f.update(40.0, (500.0, 19.0, 18.5, 18.0, 17.0), 10.0, 10.0)  # one hung, the rest older
    >>> round(f.value_s, 6), f.hung
    (16.0, 1)
    >>> f.rank(5), f.rank(100)  # the 4th oldest, or the oldest tenth of those running
    (4, 10)
    >>> gap = (40.0, 39.0, 38.0, 37.0, 12.0, 11.0, 10.5, 10.0, 9.0)  # four hung, the rest not
    >>> f.update(41.0, gap, 10.0, 10.0, longest_s=13.0)
    >>> f.hung
    4
    >>> f = LiveFloor()
    >>> for t in range(0, 40):
    ...     f.update(float(t), (12.0, 11.5, 11.2, 11.0, 10.5), 10.0, 10.0)
    >>> f.update(40.0, (40.0, 39.0, 38.0, 37.0, 36.0, 35.0, 34.0, 33.0, 32.0), 10.0, 10.0,
    ...          longest_s=13.0)  # all aged alike: a slowdown, none hung before 10 × T̂syn
    >>> f.hung
    0
    """

    RANK = 4  # the floor follows the 4th oldest synthesis that is not hung ...
    SHARE = 0.1  # ... or, where more run, the last of the oldest tenth of them
    HUNG_FACTOR = 10.0  # a synthesis older than this many T̂syn is hung ...
    SUSPECT_FACTOR = 2.0  # ... or older than this many, where the floor would follow it,
    SUSPECT_LONGEST = 1.5  # ... and this many times the longest the window holds,
    APART_RATIO = 1.5  # ... set apart by this ratio from the syntheses behind it
    TOLD_SLACK_S = 1e-6  # the rounding of an age worked out from a start time (s)
    SLOT_LEADS = 0.5  # the excess is kept at its highest per slot of this many lead times
    HISTORY_LEADS = 8.0  # ... over the last this many lead times
    GUARD_LEADS = 2.0  # ... but for the newest this many (the reference is from before)
    DEEP_SLACK = 1.0  # no further above the floor twice as deep than this many T̂syn

    def __init__(self, history_longest: float = 0.0) -> None:
        # The history spans at least this many of the longest syntheses the window holds
        # (``live_floor_longest``): an excursion of the ranks lasts as long as those run.
        self.history_longest = history_longest
        # [first, last, highest excess, most running, highest excess twice as deep]
        self._slots: deque[list[float]] = deque()
        self.value_s = 0.0
        self.hung = 0
        self.stuck = 0  # of the hung, those older than anything the window saw finish
        self._told_at: float | None = None  # when the youngest told hung by a gap began (s)

    def clear(self) -> None:
        """Syntheses of another regime: the excesses seen so far say nothing of the next."""
        self._slots.clear()
        self.value_s = 0.0

    def rank(self, running: int) -> int:
        """Which oldest synthesis not hung the floor follows, of ``running`` not hung."""
        return max(self.RANK, math.ceil(self.SHARE * running))

    def update(
        self, now: float, ages_s: tuple[float, ...], estimate_s: float, lead_s: float,
        running: int | None = None, longest_s: float | None = None,
    ) -> None:  # fmt: skip
        """``running`` syntheses run now (default: as many as ``ages_s`` lists), the oldest
        of them ``ages_s`` old (oldest first), T̂syn is ``estimate_s`` and the lead time was
        ``lead_s`` (the floor's last value counted): count the hung ones, set the floor
        (``value_s``), and keep the excess of the synthesis at ``rank``; where that one is
        beyond the ages listed, of the youngest listed."""
        self.hung = older_than(ages_s, self.HUNG_FACTOR * estimate_s) if estimate_s > 0 else 0
        if self._told_at is not None:  # those told by a gap stay hung while they run
            told = older_than(ages_s, now - self._told_at - self.TOLD_SLACK_S)
            self._told_at = self._told_at if told else None
            self.hung = max(self.hung, told)
        if estimate_s <= 0 or len(ages_s) - self.hung < self.RANK:
            self.value_s = 0.0
        else:
            self._follow(now, ages_s, estimate_s, lead_s, running, longest_s)
        self.stuck = self._stuck(ages_s, longest_s)

    def _follow(
        self, now: float, ages_s: tuple[float, ...], estimate_s: float, lead_s: float,
        running: int | None, longest_s: float | None,
    ) -> None:  # fmt: skip
        """Set the floor from the synthesis at its rank (telling hung ones by a gap first,
        where it would follow one of them), and keep that synthesis's excess."""
        reference, most, deep_reference = self._before(now - self.GUARD_LEADS * lead_s)
        rank, age, count = self._followed(ages_s, running, most)
        suspect = math.inf if longest_s is None else self._suspect_s(estimate_s, longest_s)
        # Where the floor would follow a suspect; or, once some are told, any more of them.
        if age > suspect or (self._told_at is not None and ages_s[self.hung] > suspect):
            listed_all = running is None or running <= len(ages_s)
            self._apart(now, ages_s, suspect, longest_s or 0.0, rank, listed_all)
            rank, age, count = self._followed(ages_s, running, most)
        deep = self._deep(ages_s, rank)
        self.value_s = 0.0 if reference is None else age - reference
        if deep is not None and deep_reference is not None and reference is not None:
            # A slowdown ages the syntheses twice as deep alike; a few hung or straggling
            # ones set apart from them hold the floor no further than DEEP_SLACK beyond.
            self.value_s = min(self.value_s, deep - deep_reference + self.DEEP_SLACK * estimate_s)
        self.value_s = max(0.0, self.value_s)  # below zero it would lift nothing
        deep_excess = -math.inf if deep is None else deep - estimate_s
        history_s = max(self.HISTORY_LEADS * lead_s, self.history_longest * (longest_s or 0.0))
        self._keep(now, age - estimate_s, count, estimate_s, history_s, deep_excess)

    def _deep(self, ages_s: tuple[float, ...], rank: int) -> float | None:
        """The age of the synthesis not hung twice as deep as ``rank``; None where fewer are
        listed."""
        at = self.hung + 2 * rank - 1
        return ages_s[at] if at < len(ages_s) else None

    def _followed(
        self, ages_s: tuple[float, ...], running: int | None, most: int | None
    ) -> tuple[int, float, int]:
        """The rank the floor follows among those not hung, that synthesis's age (s), and how
        many run not hung."""
        listed = len(ages_s) - self.hung
        count = max(listed, (running or 0) - self.hung)
        # Those running now, but no more than the most at the reference's time, as the margin
        # is: after a slowdown more are sent, and a rank grown with them would see it later.
        rank = self.rank(count if most is None else min(count, most))
        return rank, ages_s[self.hung + min(rank, listed) - 1], count

    def _apart(
        self, now: float, ages_s: tuple[float, ...], suspect_s: float, longest_s: float,
        rank: int, listed_all: bool = False,
    ) -> None:  # fmt: skip
        """Count as hung those older than ``suspect_s`` (``_suspect_s``) where the ``rank``-th
        synthesis behind them is no older than ``longest_s``, the longest the window holds,
        and ``APART_RATIO`` times younger than the youngest of them. A slowdown ages them all
        alike; a hang leaves a gap in the ages. They stay hung while they run, whatever the
        ages behind them do. At least ``RANK`` must be listed behind them; where
        ``listed_all`` (every synthesis running is listed), one is enough, the youngest then
        standing for the rank: on a host of few slots, hung ones may leave only one or two
        running (D212)."""
        suspects = older_than(ages_s, suspect_s)
        need = 1 if listed_all else self.RANK
        if suspects <= self.hung or suspects + need > len(ages_s):
            return  # none new, or too few listed behind them to tell a gap
        behind = ages_s[min(suspects + rank, len(ages_s)) - 1]
        if behind <= longest_s and behind * self.APART_RATIO <= ages_s[suspects - 1]:
            self.hung = suspects
            self._told_at = now - ages_s[suspects - 1]  # the youngest told began then

    def _stuck(self, ages_s: tuple[float, ...], longest_s: float | None) -> int:
        """Of the hung ones, how many are older than ``SUSPECT_LONGEST`` × ``longest_s``, the
        longest synthesis the window holds (all of them where it holds none): unlike any
        synthesis the host was seen to finish. Under a heavy tail a straggler may pass ten
        T̂syn and still be computing; one this far out is stuck."""
        if not longest_s:
            return self.hung
        return min(self.hung, older_than(ages_s, self.SUSPECT_LONGEST * longest_s))

    def _suspect_s(self, estimate_s: float, longest_s: float) -> float:
        """The age (s) past which a synthesis may be hung, if a gap sets it apart:
        ``SUSPECT_LONGEST`` × the window's longest, and at least ``SUSPECT_FACTOR`` × T̂syn."""
        return max(self.SUSPECT_FACTOR * estimate_s, self.SUSPECT_LONGEST * longest_s)

    def _before(self, guard: float) -> tuple[float | None, int | None, float | None]:
        """The highest excess, the most running and the highest excess twice as deep of the
        slots that ended by ``guard`` (s); None for each where none did."""
        reference: float | None = None
        most: int | None = None
        deep: float | None = None
        for _, last, excess, count, deep_excess in self._slots:
            if last <= guard:
                reference = excess if reference is None else max(reference, excess)
                most = int(count) if most is None else max(most, int(count))
                if deep_excess > -math.inf:
                    deep = deep_excess if deep is None else max(deep, deep_excess)
        return reference, most, deep

    def _keep(
        self, now: float, excess: float, count: int, estimate_s: float, history_s: float,
        deep_excess: float = -math.inf,
    ) -> None:  # fmt: skip
        slots = self._slots
        if slots and now - slots[-1][0] < self.SLOT_LEADS * estimate_s:
            slot = slots[-1]
            slot[1], slot[2], slot[3] = now, max(slot[2], excess), max(slot[3], count)
            slot[4] = max(slot[4], deep_excess)
        else:
            slots.append([now, now, excess, count, deep_excess])
        horizon = now - history_s
        while len(slots) > 1 and slots[0][1] < horizon:
            slots.popleft()
