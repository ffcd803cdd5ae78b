"""Partitions in flight, from dispatch to their outcome; their memory and their time limits."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pacer.control.policy import Caps, DispatchPolicy
from pacer.pipeline.attempts import CALLS, Call, CallLimits, CallTimedOut, seconds_text
from pacer.pipeline.busy import GpuReadings
from pacer.pipeline.calls import PoolCalls
from pacer.pipeline.holdings import Holdings
from pacer.pipeline.proving import ProvingWorkers, Worker
from pacer.pipeline.timers import Timers
from pacer.pipeline.work import Observer, Outcome, Running, Work
from pacer.workload import Pool, Proof, Workload, pooled

log = logging.getLogger("pacer.pipeline")
WATCH_MIN_S = 0.01  # the watchdog checks call limits at 1/20 of the shortest, within these
WATCH_MAX_S = 1.0
WORKLOAD_CALLS: dict[Call, str] = {"synthesis": "synthesize", "prove": "prove", "verify": "verify"}
"""The workload's method behind each call, as `Workload.abandoned` names it."""


class InFlight(GpuReadings):
    """Partitions from dispatch to their `Outcome`, which goes to ``on_outcome``.

    Each is synthesized (`PoolCalls`), waits in the ready queue, is proved (`ProvingWorkers`) and
    maybe verified, on ``verify_threads`` threads of its own (0: on the synthesis threads).
    `Pipeline` adds the backlog and paced dispatch. ``controller`` hears every
    synthesis and proving time.

    ``on_task_failure(name, exc)``, if set, is called on the loop when a call hangs (``exc`` is a
    `CallTimedOut`), raises a BaseException that is not an Exception, or a worker's thread dies.
    Names are ``prove-3``, ``synthesis``, ``verify`` and ``pipeline-watchdog``.
    """

    provers: ProvingWorkers

    def __init__(
        self,
        controller: DispatchPolicy,
        workload: Workload,
        caps: Caps,
        *,
        workers: int,
        on_outcome: Callable[[Outcome], None],
        observer: Observer | None,
        limits: CallLimits,
        clock: Callable[[], float],
        timers: Timers,
        verify_threads: int = 0,
    ) -> None:
        self.controller = controller
        self.workload = workload
        self._pooled = pooled(workload)
        self.caps = caps
        self._on_outcome = on_outcome
        self.observer = observer
        self.on_task_failure: Callable[[str, BaseException], None] | None = None
        self.limits = limits
        self._clock = clock
        self._timers = timers
        self.holdings = Holdings(workload.release)
        self.calls = PoolCalls(
            workload,
            caps.synthesis_concurrency,
            clock=clock,
            synthesized=self._synthesized,
            verified=self._verified,
            verify_threads=verify_threads,
        )
        self.provers = ProvingWorkers(
            workload,
            workers,
            clock,
            proved=self._proved,
            died=self._worker_died,
            returned=self._abandoned_returned,
            stall_s=lambda: self.limits.limit_s("prove"),
            refused=self._refused,
        )
        # A fleet's host: what a partition a gate refused at a GPU goes back to.
        self.on_refused: Callable[[str, int], None] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._cancelled: set[str] = set()  # jobs whose outcomes are no longer reported
        self.hung_calls: dict[Call, int] = dict.fromkeys(CALLS, 0)
        self.proved = 0

    # -- state ----------------------------------------------------------------------------

    @property
    def ready(self) -> int:
        return self.provers.ready

    @property
    def synthesizing(self) -> int:
        return self.calls.synthesizing

    @property
    def verifying(self) -> int:
        return self.calls.verifying

    @property
    def gpu_busy(self) -> int:
        return self.provers.busy

    @property
    def workers(self) -> int:
        return len(self.provers.workers)

    @property
    def inflight(self) -> int:
        """Partitions holding memory, but for those of abandoned calls."""
        return self.holdings.inflight

    @property
    def inflight_bytes(self) -> int:
        """Bytes partitions hold, abandoned calls' included."""
        return self.holdings.inflight_bytes

    @property
    def abandoned(self) -> int:
        """Partitions held by abandoned calls that have not returned."""
        return self.holdings.abandoned

    @property
    def abandoned_bytes(self) -> int:
        return self.holdings.abandoned_bytes

    @property
    def abandoned_threads(self) -> int:
        """Threads still running a call that was abandoned (synthesis, prove or verify)."""
        return self.calls.abandoned_threads + self.provers.abandoned_threads

    @property
    def pool(self) -> Pool | None:
        """The workload's pinned pool, once it has one."""
        return None if self._pooled is None else self._pooled.pool

    @property
    def synthesis_restarts(self) -> int:
        """Times the workload replaced its synthesis processes after one died."""
        return self.workload.synthesis_restarts

    @property
    def live_workers(self) -> int:
        """Proving workers whose thread runs or has yet to start."""
        return self.provers.live

    @property
    def idle(self) -> bool:
        """Nothing in flight: no synthesis, nothing ready, no worker proving or verifying."""
        return self.inflight == 0 and self.verifying == 0

    # -- synthesis ------------------------------------------------------------------------

    def _synthesized(self, running: Running) -> None:
        done, current = self.calls.finished(running)
        work = running.work
        exc = None if done.cancelled() else done.exception()
        if not current:  # abandoned: the attempt failed already
            self._abandoned_returned(running, None if exc or done.cancelled() else done.result())
            return
        if done.cancelled():  # the pool shut down before it started: pending in the journal
            self._release(work)
            return
        if exc is not None:
            self.controller.observe_synthesis_failure(self._clock() - work.dispatched_at)
            log.error("synthesis failed: %r", exc, exc_info=exc, extra=work.context())
            self._release(work)
            if not isinstance(exc, Exception):
                self._task_failed("synthesis", exc)
            self._report(Outcome(work.spec.job_id, work.spec.index, None, 0.0, 0.0,
                                 error=f"synthesis failed: {exc!r}", call="synthesis"))  # fmt: skip
            return
        work.buffers = done.result()
        now = self._clock()
        work.synthesis_s = now - work.dispatched_at
        self.controller.observe_synthesis(work.synthesis_s, work.synthesis_parts(now))
        if self.observer is not None:
            self.observer.synthesized(work.synthesis_s, work.synthesis_wait_s)
        self.provers.put(work)
        self._wake.set()

    # -- proving ----------------------------------------------------------------------------

    def _proved(
        self, worker: Worker, work: Work, start: float, end: float, gap: float | None,
        proof: Proof | None, error: str | None, raised: BaseException | None,
    ) -> None:  # fmt: skip
        self.provers.progress.progress()
        if gap is not None and self.observer is not None:
            self.observer.idle_gap(worker.gpu.label, gap)
        spec = work.spec
        outcome = Outcome(spec.job_id, spec.index, worker.gpu.label, work.synthesis_s, end - start,
                          proof, error, None if proof is not None else "prove",
                          work.lease, work.synthesis_wait_s)  # fmt: skip
        if raised is not None and not isinstance(raised, Exception):
            self._task_failed(f"prove-{worker.index}", raised)  # it would have ended the thread
        if proof is not None:
            self.proved += 1
            self.controller.observe_gpu_service(end - start)
            if self.observer is not None:
                self.observer.proved(worker.gpu.label, end - start, proof.phases_s)
            if work.verify:
                self.calls.verify(work, outcome)
                return
        self._release(work)
        self._report(outcome)

    def _refused(self, work: Work) -> None:
        """A gate refused the partition at a GPU: its memory goes back, it is not proved."""
        self._release(work)
        if self.on_refused is not None:
            self.on_refused(work.spec.job_id, work.spec.index)

    def _worker_died(self, worker: Worker, thread: threading.Thread, exc: BaseException) -> None:
        """Handle a worker thread that died on pacer's own error.

        Fails the partition it held, if any, and starts a new thread unless closing.
        """
        log.error("proving worker %d died: %r", worker.index, exc, exc_info=exc,
                  extra={"gpu": worker.gpu.label})  # fmt: skip
        self._task_failed(f"prove-{worker.index}", exc)
        if worker.thread is not thread:
            return
        running = worker.running
        if running is not None and running.state.abandon():
            self.provers.vacate(worker, self._clock(), abandoned=False)
            self._release(running.work)
            spec = running.work.spec
            self._report(Outcome(spec.job_id, spec.index, worker.gpu.label,
                                 running.work.synthesis_s, 0.0,
                                 error=f"proving worker died: {exc!r}", call="prove"))  # fmt: skip
        if not self._closing:
            self.provers.start_thread(worker)

    # -- verification -------------------------------------------------------------------------

    def _verified(self, running: Running) -> None:
        done, current = self.calls.finished(running)
        work, outcome = running.work, running.outcome
        assert outcome is not None
        if not current:  # abandoned: the attempt failed already
            self._abandoned_returned(running, None)
            return
        if done.cancelled():  # the pool shut down before it started: pending in the journal
            self._release(work)
            return
        exc = done.exception()
        error = None
        try:
            if exc is None and not done.result():
                error = "verification failed: the proof does not check"
        except Exception as bad:  # a result whose truth cannot be told
            exc = bad
        if exc is not None:
            error = f"verification failed: {exc!r}"
            if not isinstance(exc, Exception):
                self._task_failed("verify", exc)
        self._release(work)
        if error is not None:
            log.error(error, exc_info=exc, extra=work.context(outcome.gpu))
            outcome = Outcome(outcome.job_id, outcome.index, outcome.gpu, outcome.synthesis_s,
                              outcome.gpu_s, error=error, call="verify")  # fmt: skip
        else:
            outcome = replace(outcome, verify_s=max(0.0, self._clock() - running.started))
        self._report(outcome)

    # -- time limits --------------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        """Abandon calls past their limit; check every 1/20 of the shortest limit (10 ms to 1 s)."""
        while True:
            interval = min(max(self.limits.shortest_s() / 20, WATCH_MIN_S), WATCH_MAX_S)
            await self._timers.sleep(interval)
            try:
                self.check_limits()
            except Exception as exc:
                log.exception("checking the calls' time limits failed")
                self._task_failed("pipeline-watchdog", exc)

    def check_limits(self) -> int:
        """Abandon every call past its limit; return how many."""
        now = self._clock()
        limits = {call: self.limits.limit_s(call) for call in CALLS}
        late = self.calls.late(now, limits)
        abandoned = 0
        for running in late:
            if running.state.abandon():
                self._abandon(running, limits[running.call])
                abandoned += 1
        for worker, proving in self.provers.late(now, limits["prove"]):
            if proving.state.abandon():
                self._abandon_prove(worker, proving, limits["prove"])
                abandoned += 1
        return abandoned

    def _abandon(self, running: Running, limit_s: float) -> None:
        """Abandon a late synthesis or verification: fail it and replace its thread.

        Its memory stays counted until the call returns.
        """
        self.calls.abandon(running)
        work, spec = running.work, running.work.spec
        error = CallTimedOut(running.call, limit_s, spec.job_id, spec.index)
        if running.call == "synthesis":
            self.controller.observe_synthesis_failure(self._clock() - work.dispatched_at)
            outcome = Outcome(spec.job_id, spec.index, None, 0.0, 0.0, error=str(error),
                              call="synthesis")  # fmt: skip
        else:
            proved = running.outcome
            assert proved is not None
            outcome = Outcome(spec.job_id, spec.index, proved.gpu, proved.synthesis_s,
                              proved.gpu_s, error=str(error), call=running.call)  # fmt: skip
        self._hold_abandoned(work, running.call)
        self._hung(running.call, running.call, error, work, outcome.gpu)
        self._report(outcome)

    def _abandon_prove(self, worker: Worker, running: Running, limit_s: float) -> None:
        """Abandon a late prove: fail it and give the worker a new thread.

        Its memory stays counted until the call returns.
        """
        now = self._clock()
        self.provers.vacate(worker, now, abandoned=True)
        work, spec = running.work, running.work.spec
        self._hold_abandoned(work, "prove")
        if not self._closing:
            self.provers.start_thread(worker)
        error = CallTimedOut("prove", limit_s, spec.job_id, spec.index)
        self._hung("prove", f"prove-{worker.index}", error, work, worker.gpu.label)
        self._report(Outcome(spec.job_id, spec.index, worker.gpu.label, work.synthesis_s,
                             now - running.started, error=str(error), call="prove"))  # fmt: skip

    def _hold_abandoned(self, work: Work, call: Call) -> None:
        """Remove the partition but keep its bytes held until its call returns.

        The workload hears of it and may stop the call (`Workload.abandoned`).
        """
        self.holdings.abandon(work)
        self._wake.set()
        try:
            self.workload.abandoned(work.spec, WORKLOAD_CALLS[call])
        except Exception:
            log.exception("telling the workload of the abandoned %s call failed", call,
                          extra=work.context())  # fmt: skip

    def _abandoned_returned(self, running: Running, late_buffers: Any) -> None:
        """Give back an abandoned partition's memory once its call returns."""
        work = running.work
        elapsed = self._clock() - running.started
        log.warning("an abandoned %s call returned after %s s; its memory is released",
                    running.call, seconds_text(elapsed), extra=work.context())  # fmt: skip
        self.holdings.returned(work, late_buffers)
        self._wake.set()

    def _hung(
        self, call: Call, task: str, error: CallTimedOut, work: Work, gpu: int | None
    ) -> None:
        self.hung_calls[call] += 1
        log.error(
            "%s: abandoned; its thread is left to finish and a new one takes its place; its "
            "%d bytes stay counted until it returns", error, work.nbytes,
            extra=work.context(gpu),
        )  # fmt: skip
        if self.observer is not None:
            self.observer.hung_call(call)
        self._task_failed(task, error)

    def _task_failed(self, task: str, exc: BaseException) -> None:
        if self.on_task_failure is None:
            return
        try:
            self.on_task_failure(task, exc)
        except Exception:
            log.exception("reporting the failure of %s failed", task)

    # -- leaving the pipeline -----------------------------------------------------------------

    def _release(self, work: Work) -> None:
        self.holdings.release(work)
        self._wake.set()

    def _report(self, outcome: Outcome) -> None:
        if outcome.job_id in self._cancelled:
            return
        if self.observer is not None:
            self.observer.finished(outcome)
        self._on_outcome(outcome)
