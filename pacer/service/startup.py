"""How long each phase of a start took, where the pool came from, and the line that says so;
while a start runs, what it waits for (`reported`).

A start takes its first steps (``first_steps``: the journal's lock, the workload, the plan),
prepares the workload (``prepare``: its pool adopted or pinned, and beside it what the
workload builds meanwhile, its parts named ``prepare.<part>``) while it opens the journal
(``open``) and resumes the journal's unfinished jobs (``resume``), then serves the API
(``api``). ``/v1/status`` shows it (``startup``).

>>> times = StartupTimes()
>>> times.record("open", 0.21)
>>> times.record("prepare", 3.14, {"pool": 3.0, "provers": 2.5})
>>> times.pool_origin = {"adopted": 21, "allocated": 0}
>>> times.ready_s = 3.4
>>> head, origin = times.words().split("; ")
>>> head
'ready in 3.4 s: open 0.2 s, prepare 3.1 s (pool 3.0 s, provers 2.5 s)'
>>> origin
'pool: 21 adopted, 0 allocated'
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger("pacer.service")


@dataclass
class StartupTimes:
    """Seconds each start-up phase took (phases that overlap each count whole), the time to
    ready, and the pool's slots by origin (adopted from the previous pacer, or allocated)."""

    phases_s: dict[str, float] = field(default_factory=dict)
    ready_s: float | None = None
    pool_origin: dict[str, int] | None = None
    running: dict[str, float] = field(default_factory=dict)  # phases begun, not ended: since

    def record(self, phase: str, seconds: float, parts: Mapping[str, float] | None = None) -> None:
        """``phase`` took ``seconds``; ``parts``, seconds by name, happened within it."""
        self.phases_s[phase] = seconds
        parts = parts or {}
        for part, part_s in parts.items():
            self.phases_s[f"{phase}.{part}"] = part_s

    async def timed(
        self,
        phase: str,
        work: Awaitable[T],
        clock: Callable[[], float],
        began: float | None = None,
    ) -> T:
        """``work``'s result, its time recorded as ``phase``: from ``began`` on ``clock`` (work
        begun before it is awaited), else from now."""
        self.running[phase] = started = clock() if began is None else began
        try:
            return await work
        finally:
            self.running.pop(phase, None)
            self.record(phase, clock() - started)

    def waiting(self, now: float) -> str:
        """The phases still running, and how long each has run so far."""
        running = [f"{name.replace('_', ' ')} {now - since:.0f} s" for name, since in
                   self.running.items()]  # fmt: skip
        return ", ".join(running) or "nothing named"

    def words(self) -> str:
        """One line for the log: every phase, its parts in brackets, then the pool's origin."""
        top = [name for name in self.phases_s if "." not in name]
        shown = []
        for name in top:
            parts = [
                f"{part.partition('.')[2].replace('_', ' ')} {seconds:.1f} s"
                for part, seconds in self.phases_s.items()
                if part.startswith(f"{name}.")
            ]
            inner = f" ({', '.join(parts)})" if parts else ""
            shown.append(f"{name} {self.phases_s[name]:.1f} s{inner}")
        head = "ready" if self.ready_s is None else f"ready in {self.ready_s:.1f} s"
        line = f"{head}: {', '.join(shown)}"
        if self.pool_origin is not None:
            origin = self.pool_origin
            line += f"; pool: {origin['adopted']} adopted, {origin['allocated']} allocated"
        return line

    def as_json(self) -> dict[str, Any]:
        return {
            "ready_s": None if self.ready_s is None else round(self.ready_s, 3),
            "phases_s": {name: round(seconds, 3) for name, seconds in self.phases_s.items()},
            "pool_origin": self.pool_origin,
        }


@contextlib.asynccontextmanager
async def reported(say: Callable[[], object], every_s: float) -> AsyncIterator[None]:
    """While the ``async with`` runs, call ``say`` every ``every_s`` (a start that takes long
    says what it waits for)."""

    async def saying() -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                say()
            except Exception:  # a report that fails must not end the reports, or the start
                log.exception("saying what the start waits for failed")

    task = asyncio.ensure_future(saying())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
