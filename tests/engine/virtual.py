"""The engine hub on virtual time: its timers on a `FakeClock`, and a WebSocket that keeps
what the hub writes to it."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import json
from collections.abc import Callable
from typing import Any

from tests.conftest import FakeClock


class Timer:
    """One callback, due at ``due`` on the virtual clock (None: as soon as the test runs
    what is ready)."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualScheduler:
    """`pacer.engine.hub.Scheduler` on ``clock``: ``call_soon`` callbacks run at `run_ready`,
    ``call_later`` ones when `advance` moves the clock to their time."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self._ready: list[Timer] = []
        self._later: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()

    def call_soon(self, callback: Callable[[], None]) -> Timer:
        timer = Timer(callback)
        self._ready.append(timer)
        return timer

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(callback)
        heapq.heappush(self._later, (self.clock() + delay_s, next(self._order), timer))
        return timer

    @property
    def next_at(self) -> float | None:
        """When the earliest timer not cancelled is due; None without one."""
        live = [at for at, _, timer in self._later if not timer.cancelled]
        return min(live, default=None)

    def run_ready(self) -> int:
        """Run the ``call_soon`` callbacks; how many ran."""
        ready, self._ready = self._ready, []
        ran = [timer.callback() for timer in ready if not timer.cancelled]
        return len(ran)

    def advance(self, seconds: float) -> None:
        """Move the clock by ``seconds``, running each timer due by then at its time."""
        end = self.clock() + seconds
        while self._later and self._later[0][0] <= end:
            at, _, timer = heapq.heappop(self._later)
            if not timer.cancelled:
                self.clock.now = max(self.clock.now, at)
                timer.callback()
        self.clock.now = end


class FakeSocket:
    """The WebSocket an engine is connected by: keeps each frame the hub sends, and how it
    was closed. ``blocked``: sends wait forever (an engine that does not read)."""

    def __init__(self, *, blocked: bool = False) -> None:
        self.sent: list[dict[str, Any]] = []
        self.closed = False
        self.close_code: int | None = None
        self.blocked = blocked

    async def send_str(self, text: str) -> None:
        if self.blocked:
            await asyncio.Event().wait()
        self.sent.append(json.loads(text))

    async def close(self, *, code: int, message: bytes = b"") -> bool:
        self.closed, self.close_code = True, code
        return True

    def decisions(self) -> list[dict[str, Any]]:
        return [m for m in self.sent if m["type"] == "decision"]
