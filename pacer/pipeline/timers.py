"""How the pipeline waits: the dispatch loop until its next decision is due or an event wakes
it, the watchdog between checks of the calls' limits, a drain up to its budget.

The service waits on the event loop's clock (`LoopTimers`); a test passes timers on its
virtual clock, so that time moves only when the test moves it.
"""

from __future__ import annotations

import asyncio
from typing import Protocol


class Timers(Protocol):
    """The pipeline's waits, on the same clock as the pipeline's ``clock``."""

    async def sleep(self, seconds: float) -> None:
        """Return after ``seconds``."""
        ...

    async def wait(self, event: asyncio.Event, timeout_s: float | None) -> None:
        """Return once ``event`` is set, or after ``timeout_s`` (None: no limit)."""
        ...


class LoopTimers:
    """`Timers` on the event loop's clock (``time.monotonic``, the pipeline's default)."""

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def wait(self, event: asyncio.Event, timeout_s: float | None) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await event.wait()
        except TimeoutError:
            pass
