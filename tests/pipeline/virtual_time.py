"""The pipeline on virtual time: its timers on a `FakeClock`, and a driver that moves the clock
only when nothing else can happen.

The workload's calls still run on the pipeline's threads; they take no virtual time. What the
pipeline waits for by the clock (a dispatch decision that is due, the watchdog's next check, a
drain's budget) happens when the test moves the clock, never by real time passing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pacer.pipeline import Pipeline
from tests.conftest import FakeClock
from tests.waits import until

LOOPS = 2  # the pipeline's tasks that wait on its timers: the dispatch loop and the watchdog
HORIZON_S = 3600.0  # virtual time a run may take before it is called stuck


@dataclass(eq=False)
class _Wait:
    deadline: float | None
    event: asyncio.Event | None
    ended: asyncio.Future[None]

    @property
    def parked(self) -> bool:
        """Waiting with nothing to end it but the clock."""
        return not self.ended.done() and not (self.event is not None and self.event.is_set())


class VirtualTimers:
    """`pacer.pipeline.Timers` on ``clock``: a wait ends when its event is set, or when
    `advance` or `jump` moves the clock to its deadline."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._waits: list[_Wait] = []

    @property
    def parked(self) -> int:
        """Waits that only the clock can end."""
        return sum(wait.parked for wait in self._waits)

    async def sleep(self, seconds: float) -> None:
        await self._park(seconds, None)

    async def wait(self, event: asyncio.Event, timeout_s: float | None) -> None:
        await self._park(timeout_s, event)

    async def _park(self, seconds: float | None, event: asyncio.Event | None) -> None:
        if (event is not None and event.is_set()) or (seconds is not None and seconds <= 0):
            await asyncio.sleep(0)
            return
        deadline = None if seconds is None else self.clock() + seconds
        wait = _Wait(deadline, event, asyncio.get_running_loop().create_future())
        self._waits.append(wait)
        ends: set[asyncio.Future[Any]] = {wait.ended}
        if event is not None:
            ends.add(asyncio.ensure_future(event.wait()))
        try:
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waits.remove(wait)
            for end in ends:
                end.cancel()

    def advance(self, seconds: float) -> None:
        """Move the clock by ``seconds``, ending every wait due by then."""
        self._move_to(self.clock() + seconds)

    def jump(self) -> bool:
        """Move the clock to the earliest deadline of a wait, ending those due then; False
        (the clock unmoved) when no wait has a deadline."""
        deadlines = [w.deadline for w in self._waits if w.deadline is not None and w.parked]
        if not deadlines:
            return False
        self._move_to(max(self.clock(), min(deadlines)))
        return True

    async def step(self, seconds: float) -> None:
        """`advance`, then wait until the pipeline's loops that it woke wait again (what they
        started may still be running)."""
        self.advance(seconds)
        await until(lambda: self.parked == LOOPS, "the pipeline's loops to wait again")

    def _move_to(self, now: float) -> None:
        self.clock.now = now
        for wait in self._waits:
            if wait.deadline is not None and wait.deadline <= now and not wait.ended.done():
                wait.ended.set_result(None)


async def settle(pipeline: Pipeline, timers: VirtualTimers) -> None:
    """Until nothing can happen but by the clock: no partition in flight, and the pipeline's
    loops both waiting on a timer."""
    await until(lambda: pipeline.idle and timers.parked == LOOPS,
                "the pipeline to wait on the clock alone")  # fmt: skip


async def run_until(
    pipeline: Pipeline, timers: VirtualTimers, done: Callable[[], object], what: str
) -> None:
    """Run the started ``pipeline`` until ``done()``: let what is in flight finish, then move
    the clock to the next deadline, and again."""
    horizon = timers.clock() + HORIZON_S
    while True:
        await settle(pipeline, timers)
        if done():
            return
        if not timers.jump():
            raise AssertionError(f"the pipeline waits on nothing the clock can bring: {what}")
        if timers.clock() > horizon:
            raise AssertionError(f"no {what} within {HORIZON_S:g} s of virtual time")
