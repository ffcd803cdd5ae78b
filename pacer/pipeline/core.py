"""The `Pipeline`: the backlog of accepted jobs and the loop that paces them into dispatch."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from pacer.config import TimeoutSettings
from pacer.control.policy import Caps, DispatchPolicy, Observation
from pacer.pipeline.attempts import CallLimits
from pacer.pipeline.backlog import Backlog
from pacer.pipeline.inflight import InFlight
from pacer.pipeline.timers import LoopTimers, Timers
from pacer.pipeline.work import Observer, Outcome, Work
from pacer.ranges import IndexRanges
from pacer.runtime.supervision import Supervisor
from pacer.workload import Workload

log = logging.getLogger("pacer.pipeline")

MIN_WAIT_S = 0.001
SKIP_LOG_S = 60.0  # the least time between two warnings of skipped verifications (s)


class Pipeline(InFlight):
    """Runs partitions of accepted jobs through synthesis and proving, paced by ``controller``.

    - ``on_outcome`` is called on the loop for every partition that leaves the pipeline.
    - ``budget_bytes`` bounds what partitions in flight hold.
    - Every ``verify_every``-th dispatched partition is verified (0: none). Where verification
      has threads of its own and they are spoken for, the pick moves on to a later partition
      (`_picks_verification`).
    - ``after_dispatch``, if set, is called on the loop after each dispatch round.
    - ``clock`` and ``timers`` must be one clock.

    See `InFlight` for ``on_task_failure``.
    """

    def __init__(
        self,
        controller: DispatchPolicy,
        workload: Workload,
        caps: Caps,
        *,
        workers: int,
        budget_bytes: int,
        on_outcome: Callable[[Outcome], None],
        observer: Observer | None = None,
        verify_every: int = 0,
        verify_threads: int = 0,
        limits: CallLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        timers: Timers | None = None,
    ) -> None:
        super().__init__(controller, workload, caps, workers=workers, on_outcome=on_outcome,
                         observer=observer, limits=limits or CallLimits(TimeoutSettings()),
                         clock=clock, timers=timers or LoopTimers(),
                         verify_threads=verify_threads)  # fmt: skip
        self.budget_bytes = budget_bytes
        self.verify_every = verify_every  # may change while running: read at each dispatch
        # A heap of jobs, each with its pending partitions as runs: a job of a million
        # partitions costs one heap entry and one run.
        self._backlog = Backlog()
        self._dispatched = 0
        self._verification_due = False  # a partition is to be picked for verification
        self.verifications_skipped = 0  # due, but a pick was still waiting for the verify threads
        self._skip_logged_at = -math.inf
        self.after_dispatch: Callable[[], None] | None = None
        self._dispatching = False
        self._held = False
        self._dispatcher: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None

    @property
    def backlog(self) -> int:
        return len(self._backlog)

    @property
    def dispatched(self) -> int:
        """Partitions dispatched since the pipeline was made."""
        return self._dispatched

    @property
    def dispatching(self) -> bool:
        """Whether the pipeline may dispatch now: started, not draining, not held."""
        return self._dispatching and not self._held

    def observation(self) -> Observation:
        now = self._clock()
        pool = self.pool
        queued = None if self._held else self._backlog.peek()
        return Observation(
            ready=self.ready,
            synthesizing=self.synthesizing,
            gpu_busy=self.gpu_busy,
            gpu_workers=self.live_workers,
            backlog=0 if queued is None else self.backlog,
            pool_free=None if pool is None else int(pool.slots_free),
            budget_free=None if queued is None else self._budget_room(queued.params),
            synthesis_ages_s=self.calls.synthesis_ages(now),
            gpu_busy_ages_s=self.provers.busy_ages(now),
        )

    # -- jobs -----------------------------------------------------------------------------

    def enqueue(
        self, job_id: str, seed: int, params: dict[str, Any], indices: Iterable[int],
        *, priority: int = 0, order: int = 0,
    ) -> None:  # fmt: skip
        """Add partitions of a job to the backlog, in the order `Backlog.add` gives; those
        in flight already are left out (a partition is in the pipeline once at most).

        A ``range`` or an `IndexRanges` stays a few runs however many partitions it holds.
        """
        self._cancelled.discard(job_id)
        flying = self.holdings.indices(job_id)
        if flying:
            indices = IndexRanges.without(indices, flying)
        self._backlog.add(job_id, seed, params, indices, priority=priority, order=order)
        self._wake.set()

    def cancel(self, job_id: str) -> int:
        """Drop a job's partitions from the backlog; return how many were dropped.

        Partitions in flight finish and are not reported.
        """
        self._cancelled.add(job_id)
        dropped = self._backlog.cancel(job_id)
        self._wake.set()
        return dropped

    def waiting(self, job_id: str) -> int:
        """The job's partitions in the backlog."""
        pending = self._backlog.pending(job_id)
        return 0 if pending is None else len(pending)

    def discard(self, job_id: str, indices: IndexRanges) -> int:
        """Drop those of ``indices`` that wait in the backlog; return how many were dropped.

        Partitions in flight finish and are reported.
        """
        dropped = self._backlog.discard(job_id, indices)
        self._wake.set()
        return dropped

    # -- running --------------------------------------------------------------------------

    def start(self, supervisor: Supervisor | None = None) -> None:
        """Start the dispatch loop, the watchdog and the proving workers on the running loop.

        With a ``supervisor``, the loop and watchdog run as its tasks ``dispatch`` and
        ``call-watchdog``, restarted if they fail.
        """
        self._dispatching = True
        if supervisor is None:
            self._dispatcher = asyncio.create_task(self._dispatch_loop(), name="pacer-dispatch")
            self._watchdog = asyncio.create_task(self._watch_loop(), name="pacer-watchdog")
        else:
            self._dispatcher = supervisor.start("dispatch", self._dispatch_loop)
            self._watchdog = supervisor.start("call-watchdog", self._watch_loop)
        self.provers.start()

    def hold(self, held: bool) -> None:
        """Dispatch nothing new while ``held``; False resumes. Work in flight goes on.

        While held, the policy sees no backlog, so its integral does not wind up.
        """
        self._held = held
        self._wake.set()

    def stop_dispatching(self) -> None:
        self._dispatching = False
        self._wake.set()

    async def drain(self, timeout_s: float) -> bool:
        """Stop dispatching; wait up to ``timeout_s`` for work in flight. True if all finished."""
        self.stop_dispatching()
        deadline = self._clock() + timeout_s
        while not self.idle:
            left = deadline - self._clock()
            if left <= 0:
                return False
            self._wake.clear()
            await self._timers.wait(self._wake, min(left, 0.5))
        return True

    async def close(self) -> None:
        """Stop the workers and release the threads, without waiting for running calls."""
        self._closing = True
        self.stop_dispatching()
        if self._dispatcher is not None:
            await self._dispatcher
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
        self.provers.stop()
        self.calls.shutdown()

    async def _dispatch_loop(self) -> None:
        while self._dispatching:
            decision = self.controller.decide(self.observation())
            for _ in range(decision.dispatch):
                if not self._dispatch_one():
                    break
            self._wake.clear()
            if self.after_dispatch is not None:
                self.after_dispatch()
            timeout = None
            if decision.next_at is not None:
                # Timers are good to about a millisecond; the controller catches up on what
                # fell due meanwhile, so waking more often would only spin.
                timeout = max(decision.next_at - self._clock(), MIN_WAIT_S)
            await self._timers.wait(self._wake, timeout)

    def _budget_room(self, params: dict[str, Any]) -> int:
        """Partitions of a job of ``params`` that the byte budget admits now."""
        return self.holdings.room(self.workload.partition_bytes(params), self.budget_bytes)

    def _dispatch_one(self) -> bool:
        queued = None if self._held else self._backlog.peek()
        if queued is None:
            return False
        nbytes = self.workload.partition_bytes(queued.params)
        if self.holdings.room(nbytes, self.budget_bytes) < 1:
            return False  # exact byte budget: wait for memory to come back
        spec = self._backlog.pop()
        assert spec is not None
        work = Work(spec, nbytes, dispatched_at=self._clock())
        self._dispatched += 1
        work.verify = self._picks_verification()
        self.holdings.take(work)
        self.calls.synthesize(work)
        return True

    def _picks_verification(self) -> bool:
        """Whether the partition dispatched now is to be verified.

        Every ``verify_every``-th is due. A due pick waits while the partitions picked already
        fill `PoolCalls.verify_room`, and the first dispatch after that takes it. One that falls
        due while a pick still waits is skipped (`verifications_skipped`). So verification
        never falls behind holding memory, nor slows synthesis: the share verified drops to
        what the verify threads keep up with.
        """
        if self.verify_every and self._dispatched % self.verify_every == 0:
            if self._verification_due:
                self._skip_verification()
            self._verification_due = True
        if not self._verification_due or self.holdings.to_verify >= self.calls.verify_room:
            return False
        self._verification_due = False
        return True

    def _skip_verification(self) -> None:
        self.verifications_skipped += 1
        now = self._clock()
        if now - self._skip_logged_at >= SKIP_LOG_S:
            self._skip_logged_at = now
            log.warning(
                "verification is behind: skipped %d so far; verify threads %d "
                "(PACER_VERIFY_THREADS), one partition in %d due (PACER_VERIFY_EVERY)",
                self.verifications_skipped, self.calls.verify_threads, self.verify_every,
            )  # fmt: skip
