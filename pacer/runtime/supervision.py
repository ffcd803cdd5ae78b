"""Liveness that tells the truth: supervised tasks and the progress watchdog.

A :class:`Supervisor` restarts a long-lived task that fails, after a backoff, and logs and counts
the failure. A :class:`ProgressWatchdog` says when work has waited too long without progress.
Each is a :class:`ReadinessSource`: ``reasons()`` lists why the service should not get work, and
``/readyz`` answers 503 with them (docs/decisions/observability.md, D49).

The logic is plain code on an injected clock; only :meth:`Supervisor.start` touches asyncio.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger("pacer.runtime.supervision")

CRASH_LOOP_FAILURES = 3
"""Failures in a row (without a healthy run between them) that make a task crash-looping."""


class ReadinessSource(Protocol):
    """Something that can tell why the service should not take work now."""

    def reasons(self) -> list[str]:
        """Why the service is not ready, one line each; empty when this source sees none."""
        ...


@dataclass(frozen=True)
class Backoff:
    """How long a crashed task waits before it starts again: ``initial_s`` doubling with each
    failure in a row, at most ``max_s``; a run of ``healthy_after_s`` ends the streak.

    >>> [Backoff().delay_s(n) for n in (1, 2, 3, 10, 20)]
    [0.1, 0.2, 0.4, 30.0, 30.0]
    """

    initial_s: float = 0.1
    max_s: float = 30.0
    healthy_after_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.initial_s > 0:
            raise ValueError(f"initial_s must be greater than 0, got {self.initial_s}")
        if self.max_s < self.initial_s:
            raise ValueError(f"max_s ({self.max_s}) must be at least initial_s ({self.initial_s})")
        if self.healthy_after_s < 0:
            raise ValueError(f"healthy_after_s must be at least 0, got {self.healthy_after_s}")

    def delay_s(self, in_a_row: int) -> float:
        """The wait (s) after the ``in_a_row``-th failure in a row (1 for the first)."""
        if in_a_row < 1:
            raise ValueError(f"in_a_row must be at least 1, got {in_a_row}")
        # 2**n overflows a float past n = 1023; the cap is reached long before.
        return min(self.max_s, self.initial_s * 2.0 ** min(in_a_row - 1, 64))


@dataclass
class TaskHealth:
    """One supervised task's state: running, or waiting to restart after a failure.

    ``in_a_row`` counts failures without a healthy run (``Backoff.healthy_after_s``) between
    them; it sets the backoff and, at :data:`CRASH_LOOP_FAILURES`, keeps the task unready
    while it runs until it has run healthy again.
    """

    name: str
    running_since: float | None = None
    restart_at: float | None = None  # set while waiting to restart
    failures: int = 0
    in_a_row: int = 0
    last_error: str | None = None

    def started(self, now: float) -> None:
        self.running_since = now
        self.restart_at = None

    def crashed(self, now: float, exc: BaseException, backoff: Backoff) -> float:
        """Count a failure at ``now``; the wait (s) before the restart."""
        if self._ran_healthy(now, backoff):
            self.in_a_row = 0
        self.failures += 1
        self.in_a_row += 1
        self.last_error = repr(exc)
        delay = backoff.delay_s(self.in_a_row)
        self.running_since = None
        self.restart_at = now + delay
        return delay

    def ended(self) -> None:
        """The task returned or was cancelled: it is neither running nor waiting."""
        self.running_since = None
        self.restart_at = None

    def reason(self, now: float, backoff: Backoff) -> str | None:
        """Why this task keeps the service unready at ``now``, or None."""
        if self.restart_at is not None:
            return (
                f"task {self.name} down after {self.last_error}: restarting in "
                f"{max(0.0, self.restart_at - now):.1f} s ({self.in_a_row} in a row)"
            )
        if (
            self.running_since is not None
            and self.in_a_row >= CRASH_LOOP_FAILURES
            and not self._ran_healthy(now, backoff)
        ):
            return (
                f"task {self.name} crash-looping: {self.in_a_row} failures in a row, the last "
                f"{self.last_error}"
            )
        return None

    def _ran_healthy(self, now: float, backoff: Backoff) -> bool:
        return (
            self.running_since is not None and now - self.running_since >= backoff.healthy_after_s
        )


class Supervisor:
    """Runs the service's long-lived tasks, restarts those that fail, and counts failures.

    ``start(name, run)`` runs ``run()`` as a task. An exception is logged, counted under ``name``,
    and ``run()`` is called again after ``backoff``. ``record_failure`` counts a failure from any
    thread. ``reasons()`` names each task down or crash-looping. ``stop()`` ends restarts.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.backoff = backoff or Backoff()
        self.sleep = sleep
        self._clock = clock
        self._health: dict[str, TaskHealth] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._failures: dict[str, int] = {}
        self._lock = threading.Lock()  # record_failure comes from threads
        self._stopping = False

    def expect(self, *names: str) -> None:
        """Count failures of ``names`` from 0, before any has failed (so that a rate over the
        counter sees the first one)."""
        with self._lock:
            for name in names:
                self._failures.setdefault(name, 0)

    def failures(self) -> dict[str, int]:
        """Failures so far by task name, supervised or recorded."""
        with self._lock:
            return dict(self._failures)

    def start(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None]:
        """Run ``run()`` under supervision as the task ``pacer-<name>``; restarted after a
        failure, done once ``run()`` returns or the task is cancelled."""
        if name in self._health:
            raise ValueError(f"a task named {name!r} is already supervised")
        self.expect(name)
        health = self._health[name] = TaskHealth(name)
        task = asyncio.create_task(self._supervise(health, run), name=f"pacer-{name}")
        self._tasks[name] = task
        return task

    def record_failure(self, task: str, exc: BaseException) -> None:
        """Log and count a failure of ``task`` that is not supervised here (a proving thread
        that crashed or hung); callable from any thread."""
        with self._lock:
            self._failures[task] = self._failures.get(task, 0) + 1
        log.error("%s failed: %r", task, exc, exc_info=exc, extra={"task": task})

    def stop(self) -> None:
        """No more restarts: a task that fails from now on stays down, and one waiting to
        restart ends now (its ``await`` returns normally)."""
        self._stopping = True
        for name, task in self._tasks.items():
            if self._health[name].restart_at is not None:
                task.cancel()

    def reasons(self) -> list[str]:
        now = self._clock()
        found = (health.reason(now, self.backoff) for health in self._health.values())
        return [reason for reason in found if reason is not None]

    async def _supervise(
        self, health: TaskHealth, run: Callable[[], Coroutine[Any, Any, None]]
    ) -> None:
        context = {"task": health.name}
        while True:
            health.started(self._clock())
            try:
                await run()
            except asyncio.CancelledError:
                health.ended()
                raise
            except Exception as exc:
                delay = health.crashed(self._clock(), exc, self.backoff)
                with self._lock:
                    self._failures[health.name] += 1
                if self._stopping:
                    health.ended()
                    log.error("task %s failed while stopping; not restarted", health.name,
                              exc_info=exc, extra=context)  # fmt: skip
                    return
                log.error(
                    "task %s failed (%d in a row); restarting in %.1f s",
                    health.name, health.in_a_row, delay, exc_info=exc, extra=context,
                )  # fmt: skip
                try:
                    await self.sleep(delay)
                except asyncio.CancelledError:
                    health.ended()
                    if self._stopping:
                        return  # stop() ended the wait: not restarted, not an error
                    raise
                log.info("task %s restarting", health.name, extra=context)
            else:
                health.ended()
                return


class ProgressWatchdog:
    """Says when work has waited ``stall_s`` with no progress (0: never).

    ``stall_s`` is seconds, or a callable read each time for a limit that follows an estimate;
    ``what`` begins the reason. The owner reports progress through :meth:`progress`, and calls
    :meth:`observe` before and after adding work. So the stall clock starts when work arrives at
    an idle service.

    >>> now = [0.0]
    >>> work = [False]
    >>> dog = ProgressWatchdog(300.0, lambda: work[0], lambda: now[0])
    >>> now[0] = 1000.0; dog.observe(); work[0] = True; dog.observe()  # a job after idling
    >>> now[0] = 1299.0; dog.stalled()
    False
    >>> now[0] = 1300.0; dog.reasons()
    ['stalled: work waiting and no progress for 300.0 s (limit 300 s)']
    """

    def __init__(
        self,
        stall_s: float | Callable[[], float],
        waiting: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
        *,
        what: str = "stalled: work waiting and no progress",
    ) -> None:
        if not callable(stall_s) and stall_s < 0:
            raise ValueError(f"stall_s must be at least 0 (0: never stalled), got {stall_s}")
        self._stall_s = stall_s
        self._what = what
        self._waiting_now = waiting
        self._clock = clock
        now = clock()
        self._last_progress = now
        self._since = now  # start of the stretch with work waiting and no progress
        self._waiting = False

    @property
    def stall_s(self) -> float:
        """The limit now (s); a callable limit is read each time (a derived time limit)."""
        return self._stall_s() if callable(self._stall_s) else self._stall_s

    def progress(self) -> None:
        """Something moved: a partition synthesized or proved, or a result committed."""
        now = self._clock()
        self._last_progress = now
        self._since = now

    def observe(self) -> None:
        """Look whether work waits; the stall clock starts when it begins to."""
        waiting = self._waiting_now()
        if waiting and not self._waiting:
            self._since = self._clock()
        self._waiting = waiting

    def since_progress_s(self) -> float:
        """Time since the last progress, or since the watchdog was made (s)."""
        return self._clock() - self._last_progress

    def stalled_s(self) -> float:
        """How long work has waited with no progress (s); 0 with no work."""
        self.observe()
        return self._clock() - self._since if self._waiting else 0.0

    def stalled(self) -> bool:
        limit_s = self.stall_s
        return limit_s > 0 and self.stalled_s() >= limit_s

    def reasons(self) -> list[str]:
        limit_s = self.stall_s
        if limit_s <= 0:
            return []
        stalled_s = self.stalled_s()
        if stalled_s < limit_s:
            return []
        return [f"{self._what} for {stalled_s:.1f} s (limit {limit_s:g} s)"]
