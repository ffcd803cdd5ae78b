"""The journal's part of a stop, bounded: a journal call that never returns (an fsync on a
failing disk, a query stuck on a lock) must not hold the process until its supervisor kills it.

`JournalStop.bounded` runs what a stop asks of the journal (the last commit, the journal's
close) until a deadline, or until another signal cuts the wait short (`JournalStop.cut`); then
the journal is left (`JournalAccess.leave`): what waits on it ends at once, the call still
running is left to its thread (a daemon), and one error names that call, how long it has run,
and what was not committed, which stays pending in the journal and is proved again. The rest
of the stop goes on in order (the workload's close keeps or frees the pinned pool), and
`pacer serve` exits 1. `unless_set` and `ended` are the drain's own waits, which a second
signal cuts short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from pacer.journal.health import RunningCall
from pacer.pipeline.timers import LoopTimers, Timers
from pacer.service.journal_access import JournalAccess

log = logging.getLogger("pacer.service")
T = TypeVar("T")
# What a stop waits for the journal in (`JournalStop.bounded`), and its bound, for the log.
LAST_COMMIT = "the last commit (the drain budget left, at least PACER_SHUTDOWN__JOURNAL_S)"
CLOSE = "the journal's close (PACER_SHUTDOWN__JOURNAL_S)"


async def ended(work: Future[None]) -> None:
    """Once ``work`` has ended, however: it failed where its caller was told so."""
    with contextlib.suppress(Exception):
        await asyncio.wrap_future(work)


async def unless_set(event: asyncio.Event, work: Awaitable[T]) -> T | None:
    """``work``'s result, or None once ``event`` is set (``work`` is then cancelled)."""
    task = asyncio.ensure_future(work)
    stop = asyncio.ensure_future(event.wait())
    await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


class JournalStop:
    """How long a stop waits for the journal at ``access``: `bounded` waits, each until a
    deadline on ``clock``, measured by ``timers`` (a test's may be virtual); `cut` ends the one
    in progress, and every later one, at once."""

    def __init__(
        self, access: JournalAccess, clock: Callable[[], float], timers: Timers | None = None
    ) -> None:
        self._access = access
        self._clock = clock
        self._timers = timers or LoopTimers()
        self._begun = False  # the stop has begun waiting for the journal
        self._cut = False
        self._ended: asyncio.Event | None = None  # set when the wait in progress is over

    def cut(self) -> None:
        """Another signal: once the stop waits for the journal, it waits no more. Before that
        (while in-flight work drains), the journal's waits to come are left as they are."""
        if self._begun:
            self._cut = True
            if self._ended is not None:
                self._ended.set()

    async def bounded(self, work: Coroutine[Any, Any, None], until: float, what: str) -> None:
        """Run ``work``, the stop's journal calls, until ``until`` (clock time) at most; past
        it, or once `cut`, leave the journal (its waits end with ``JournalLeft``, and ``work``
        with them) and log why, naming ``what`` waited and its bound. Once the journal is left,
        nothing waits for it."""
        self._begun = True
        task = asyncio.ensure_future(work)
        running: list[tuple[RunningCall, float]] | None = None
        began = self._clock()
        if not self._access.left:
            self._warn_if_hung(until)
            self._ended = ended = asyncio.Event()
            task.add_done_callback(lambda _: ended.set())
            if self._cut:
                ended.set()
            await self._timers.wait(ended, max(0.0, until - self._clock()))
            self._ended = None
            if not task.done():
                running = self._access.leave()
        await task
        if running is not None:
            given = f"the stop waited {until - began:.1f} s for {what}"
            self._log_left(running, "a signal cut the stop's wait short" if self._cut else given)

    def _warn_if_hung(self, until: float) -> None:
        """Say what the stop waits for, when it begins to wait on a call that already hangs."""
        stall_s = self._access.settings.stall_s
        for call, running_s in self._access.calls.running()[:1]:
            if running_s >= stall_s:
                log.warning(
                    "stopping: journal call %s has run %.1f s without returning; the stop "
                    "waits at most %.1f s more for the journal (another signal: not at all)",
                    call.name, running_s, max(0.0, until - self._clock()),
                )  # fmt: skip

    def _log_left(self, running: list[tuple[RunningCall, float]], why: str) -> None:
        """The one error of a stop that left the journal: the call, what was not committed."""
        access = self._access
        if running:
            call, running_s = running[0]
            hung = (f"journal call {call.name} has run {running_s:.1f} s on {call.thread} "
                    "without returning")  # fmt: skip
        else:
            hung = "no journal call was running"
        results, attempts = len(access.pending), sum(map(len, access.failures.values()))
        if results or attempts:
            redo = ("by the fleet's hosts once this host's leases lapse"
                    if access.settings.fleet else "on the next start")  # fmt: skip
            left = (f"{results} results and {attempts} failed attempts not committed stay "
                    f"pending there and are proved again {redo}")  # fmt: skip
        else:
            left = "nothing proved is left uncommitted"
        log.error("stopping without journal %s: %s, and %s; %s; the stop is not clean (exit "
                  "status 1)", access.settings.location, hung, why, left)  # fmt: skip
