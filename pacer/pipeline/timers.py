"""How the pipeline waits: for its next decision or an event, between checks, or during a drain.

The service waits on the event loop's clock (`LoopTimers`). A test passes timers on a virtual
clock, so time moves only when the test moves it.
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
