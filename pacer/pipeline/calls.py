"""Synthesis and verification calls on a pool of daemon threads, and abandoning late calls."""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pacer.control.policy import Observation
from pacer.pipeline.attempts import Call
from pacer.pipeline.busy import WorkersBusy
from pacer.pipeline.work import Outcome, Running, Work, threadsafe
from pacer.runtime.threads import DaemonPool
from pacer.workload import Workload


class PoolCalls:
    """``workload``'s synthesize and verify calls: syntheses on ``threads`` threads at once,
    verifications on ``verify_threads`` threads of their own (0: on the synthesis threads).

    The loop hears each call's end through ``synthesized`` or ``verified``. `finished` then says
    whether the call is still the partition's attempt or was abandoned. A call waits while
    every thread of its pool is busy; a synthesis thread is a synthesis worker, so that wait is
    the executor's queue, and when a synthesis leaves it is kept in ``Work.synthesis_began``
    (``clock`` seconds). Where synthesis runs in processes, each synthesis thread only waits on
    a process: a verification, which computes on its thread, must not take one
    (docs/decisions/pipeline.md, D201).
    """

    def __init__(
        self,
        workload: Workload,
        threads: int,
        *,
        clock: Callable[[], float],
        synthesized: Callable[[Running], None],
        verified: Callable[[Running], None],
        verify_threads: int = 0,
    ) -> None:
        self.workload = workload
        self._clock = clock
        self._on_synthesized = synthesized
        self._on_verified = verified
        # Daemon threads nothing joins: a hung synthesis or verification must not keep the
        # process alive at exit, and the pool replaces a thread stuck in an abandoned call.
        self._pool = DaemonPool(threads, "pacer-synth")
        own = DaemonPool(verify_threads, "pacer-verify") if verify_threads > 0 else None
        self._own_verify_pool = own
        self._verify_pool = own if own is not None else self._pool
        self._threads = threads
        self._busy = WorkersBusy(clock, threads)  # the synthesis threads' time in a synthesis
        self._own_verify_threads = verify_threads
        self.verify_threads = verify_threads
        self._running: set[Running] = set()
        self.synthesizing = 0
        self.verifying = 0
        self._synthesis_started: dict[int, float] = {}  # id(work) → dispatch time, in order

    @property
    def abandoned_threads(self) -> int:
        """Threads still running a call that was abandoned."""
        own = self._own_verify_pool
        return self._pool.abandoned + (own.abandoned if own is not None else 0)

    def share_verification(self, shared: bool) -> None:
        """Verify on the synthesis threads (``shared``), or on the threads of its own these
        calls were made with (where they have none, on the synthesis threads still): for
        comparing the two on one running pipeline. Verifications already submitted finish
        where they are."""
        own = self._own_verify_pool
        self._verify_pool = self._pool if shared or own is None else own
        self.verify_threads = 0 if self._verify_pool is self._pool else self._own_verify_threads

    @property
    def verify_room(self) -> float:
        """Partitions picked for verification that may be in flight at once: two a verify
        thread (one verifying, one on its way), so that none waits long holding its memory;
        unbounded where verification shares the synthesis threads."""
        return 2 * self.verify_threads if self.verify_threads > 0 else math.inf

    def synthesis_busy_ratio(self) -> float:
        """The synthesis threads' share of the trailing minute inside a synthesis (where
        synthesis runs in processes, each thread waits on one process: the processes' busy
        share), in [0, 1]."""
        return self._busy.ratio(self._synthesis_begun())

    def synthesis_busy_seconds(self) -> float:
        """Thread-seconds spent inside a synthesis so far (those running included)."""
        return self._busy.seconds(self._synthesis_begun())

    def _synthesis_begun(self) -> list[float]:
        """When each synthesis a thread runs now began (clock seconds)."""
        return [r.work.synthesis_began for r in self._running
                if r.call == "synthesis" and r.work.synthesis_began is not None
                and r.work.synthesis_ended is None]  # fmt: skip

    def synthesis_ages(self, now: float) -> tuple[float, ...]:
        """Ages (s) of the oldest syntheses running, oldest first.

        At most ``Observation.SYNTHESIS_AGES`` are returned.
        """
        # The oldest syntheses running are the first in the insertion-ordered dict.
        oldest = itertools.islice(self._synthesis_started.values(), Observation.SYNTHESIS_AGES)
        return tuple(max(0.0, now - at) for at in oldest)

    def synthesize(self, work: Work) -> None:
        sharing = self.verifying if self._verify_pool is self._pool else 0
        work.thread_free = self.synthesizing + sharing < self._threads
        self.synthesizing += 1
        self._synthesis_started[id(work)] = work.dispatched_at
        running = Running("synthesis", work, math.inf)
        self._submit(self._pool, running, self._on_synthesized, self._synthesize, running)

    def _synthesize(self, running: Running) -> Any:
        """On a pool thread: note when the synthesis began, run it, note when it ended. Its
        time limit counts from when it began: waiting for a thread is not being late."""
        work = running.work
        work.synthesis_began = running.started = self._clock()
        buffers = self.workload.synthesize(work.spec)
        work.synthesis_ended = self._clock()
        return buffers

    def verify(self, work: Work, outcome: Outcome) -> None:
        """Verify ``outcome``'s proof of ``work`` on the next verify thread free. Its time limit
        counts from when a thread takes it: waiting behind a long verification is not late."""
        self.verifying += 1
        running = Running("verify", work, math.inf, outcome=outcome)
        self._submit(self._verify_pool, running, self._on_verified, self._verify, running)

    def _verify(self, running: Running) -> Any:
        """On a pool thread: note when the verification began, run it."""
        running.started = self._clock()
        work, outcome = running.work, running.outcome
        assert outcome is not None
        assert outcome.proof is not None  # only a proof is verified
        return self.workload.verify(work.spec, work.buffers, outcome.proof)

    def _submit(
        self, pool: DaemonPool, running: Running, then: Callable[[Running], None],
        call: Callable[..., Any], *args: Any,
    ) -> None:  # fmt: skip
        # A bare future and a callback rather than a task per partition: cheaper on the loop.
        loop = asyncio.get_running_loop()
        running.future = pool.submit(call, *args)
        running.pool = pool
        self._running.add(running)
        running.future.add_done_callback(lambda _: threadsafe(loop, then, running))

    def finished(self, running: Running) -> tuple[Future[Any], bool]:
        """The call's future, and whether the call is still its partition's attempt.

        False means it was abandoned, and its attempt failed already.
        """
        self._running.discard(running)
        done = running.future
        assert done is not None
        running.future = None  # the future's callback holds ``running``: no cycle for the GC
        current = running.state.finish()
        if current:
            self._uncount(running)
            began, ended = running.work.synthesis_began, running.work.synthesis_ended
            if running.call == "synthesis" and began is not None:
                self._busy.add(began, self._clock() if ended is None else ended)
        return done, current

    def late(self, now: float, limits: dict[Call, float]) -> list[Running]:
        """The calls that have run past their limit."""
        return [r for r in self._running if now - r.started > limits[r.call]]

    def abandon(self, running: Running) -> None:
        """Abandon ``running``: cancel it if not started, else replace its thread."""
        self._running.discard(running)
        assert running.future is not None
        if not running.future.cancel():  # running, not queued: another thread takes its place
            assert running.pool is not None
            running.pool.replace(running.future)
        self._uncount(running)

    def _uncount(self, running: Running) -> None:
        if running.call == "synthesis":
            self.synthesizing -= 1
            self._synthesis_started.pop(id(running.work), None)
        else:
            self.verifying -= 1

    def shutdown(self) -> None:
        self._pool.shutdown()
        if self._own_verify_pool is not None:
            self._own_verify_pool.shutdown()
