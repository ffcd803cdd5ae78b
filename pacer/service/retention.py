"""When finished jobs may be pruned, whatever the wall clocks do.

The journal stamps jobs with a wall clock (this host's for SQLite, the database's for a fleet),
and retention compares those stamps with that clock's now. A step of it (set by hand, or by
NTP at boot, not slewed) would make every finished job look older than it is: forward, at
once; backward, for the jobs stamped meanwhile, once the clock is put right. So each wall
clock is watched against a steady one (`ClockWatch`), every step is logged, nothing is pruned
for ``retention_s`` after one (by then every job stamped before it has truly outlived its
retention), and a prune's now is never later than this host's clock as it runs without steps.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

log = logging.getLogger("pacer.service")
# A wall clock whose lead over the steady one changes by more than this between two readings has
# stepped. NTP slews at most 500 ppm: a few milliseconds between readings a second apart.
STEP_TOLERANCE_S = 1.0


class ClockWatch:
    """The steps of a wall clock, told from ``steady`` (s, a clock that never steps:
    ``time.monotonic``). Each `read` gives a wall-clock reading and the step since the last one.

    >>> watch = ClockWatch(steady)
    >>> watch.read(wall())  # 0.0: the first reading anchors it
    >>> watch.read(wall())  # 691200.0 had the clock been set 8 days on meanwhile
    """

    def __init__(self, steady: Callable[[], float], tolerance_s: float = STEP_TOLERANCE_S) -> None:
        if not tolerance_s > 0:
            raise ValueError(f"tolerance_s must be > 0, got {tolerance_s!r}")
        self._steady = steady
        self.tolerance_s = tolerance_s
        self._lead: float | None = None  # wall less steady, at the last reading
        self.steps = 0
        self.last_step_s = 0.0
        self._last_step_at: float | None = None  # on ``steady``

    def read(self, wall: float, at: float | None = None) -> float:
        """Take ``wall``, read at ``at`` on the steady clock (now if None): the step since the
        last reading (s, + forward), or 0.0 where it moved as the steady clock did, within
        the tolerance (the first reading anchors)."""
        at = self._steady() if at is None else at
        lead, previous = wall - at, self._lead
        self._lead = lead
        if previous is None or abs(lead - previous) <= self.tolerance_s:
            return 0.0
        self.steps += 1
        self.last_step_s = step = lead - previous
        self._last_step_at = at
        return step

    def expected(self) -> float | None:
        """The wall clock now had it not stepped since the last reading; None before one."""
        return None if self._lead is None else self._lead + self._steady()

    def quiet_s(self) -> float:
        """Seconds on the steady clock since the last step; infinite if none."""
        return math.inf if self._last_step_at is None else self._steady() - self._last_step_at


class Retention:
    """When finished jobs may be pruned: ``retention_s`` after they ended, on the journal's
    clock, and never because a wall clock stepped.

    ``wall`` is this host's wall clock (the SQLite journal's), watched with `watch_host`; a
    fleet's journal has the database's clock too, watched with `watch_journal`. `prune_now`
    is the now a prune may use, or None while a step is more recent than ``retention_s``.
    """

    def __init__(
        self,
        retention_s: float,
        *,
        wall: Callable[[], float] = time.time,
        steady: Callable[[], float] = time.monotonic,
        fleet: bool = False,
    ) -> None:
        self.retention_s = retention_s
        self._wall = wall
        self.steady = steady
        self.host = ClockWatch(steady)
        self.journal = ClockWatch(steady) if fleet else None
        self._paused_said = False

    def watch_host(self) -> bool:
        """Read this host's wall clock; whether it stepped since the last reading (logged)."""
        step = self.host.read(self._wall())
        if step:
            self._stepped("this host's wall clock", step)
        return bool(step)

    def watch_journal(self, wall: float, began: float, ended: float) -> bool:
        """Take the fleet journal's clock, read between ``began`` and ``ended`` on the steady
        clock; whether it stepped (logged). A reading that took longer than the tolerance
        is dropped: its wait would read as a step."""
        if self.journal is None or ended - began > self.journal.tolerance_s:
            return False
        step = self.journal.read(wall, began)
        if step:
            self._stepped("the journal's clock (the database's)", step)
        return bool(step)

    @property
    def steps(self) -> int:
        """Steps seen, of either clock."""
        return self.host.steps + (self.journal.steps if self.journal is not None else 0)

    def prune_now(self) -> float | None:
        """The latest now a prune may measure retention from: this host's wall clock as it
        runs without steps (a step since the last reading is not followed). None while a step
        of either clock is more recent than ``retention_s``: a job stamped while a clock was
        wrong would look older than it is (said once a pause)."""
        quiet_s = min(self.host.quiet_s(),
                      self.journal.quiet_s() if self.journal is not None else math.inf)  # fmt: skip
        if quiet_s < self.retention_s:
            if not self._paused_said:
                self._paused_said = True
                log.info("finished jobs are not pruned for %.0f s more: a wall clock stepped "
                         "%.0f s ago", self.retention_s - quiet_s, quiet_s)  # fmt: skip
            return None
        self._paused_said = False
        expected = self.host.expected()
        return self._wall() if expected is None else expected

    def _stepped(self, clock: str, step_s: float) -> None:
        self._paused_said = False
        log.warning(
            "%s stepped %+.1f s (set, not slewed; or the host was suspended): no finished job is "
            "pruned for PACER_JOURNAL__RETENTION_S=%g s from now, so that none goes because of "
            "the step; jobs stamped meanwhile keep the time the clock gave",
            clock, step_s, self.retention_s,
        )  # fmt: skip
