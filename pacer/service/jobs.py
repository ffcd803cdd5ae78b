"""Job operations: accept (journaled first, then queued), cancel, resume, and what follows a
failed attempt (queued again at its job's place after a backoff, or the job fails).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

from pacer.control.controller import PIController
from pacer.control.policy import DispatchPolicy
from pacer.journal import JobRecord, JobState
from pacer.journal.health import JournalUnavailable
from pacer.metrics.collectors import Metrics
from pacer.pipeline import Pipeline
from pacer.pipeline.attempts import RetrySchedule
from pacer.runtime.supervision import ProgressWatchdog, Supervisor
from pacer.service.admission import Admission
from pacer.service.journal_access import JournalAccess
from pacer.workload import job_seed

log = logging.getLogger("pacer.service")
LIVE = (JobState.QUEUED, JobState.RUNNING)
T = TypeVar("T")


class Jobs:
    """The service's jobs: each accepted job's place in the backlog (kept for its retries) and
    the partitions waiting out a backoff. ``policy()`` is the policy dispatching now;
    ``draining()`` whether the service drains. ``to_fleet``, when set (a host of a fleet),
    is called for each accepted job instead of queueing it here: the fleet's hosts claim it."""

    def __init__(
        self,
        access: JournalAccess,
        pipeline: Pipeline,
        *,
        workload: str,
        admission: Admission,
        retry: RetrySchedule,
        metrics: Metrics,
        watchdog: ProgressWatchdog,
        supervisor: Supervisor,
        policy: Callable[[], DispatchPolicy],
        draining: Callable[[], bool],
    ) -> None:
        self._access = access
        self._pipeline = pipeline
        self._workload = workload
        self._admission = admission
        self._retry = retry
        self._metrics = metrics
        self._watchdog = watchdog
        self._supervisor = supervisor
        self._policy = policy
        self._draining = draining
        self._order = 0
        self._orders: dict[str, int] = {}  # job → its place in the backlog, kept for retries
        self._retries: dict[tuple[str, int], asyncio.TimerHandle] = {}  # waiting out a backoff
        self._tasks: set[asyncio.Task[Any]] = set()
        self.to_fleet: Callable[[], None] | None = None

    @property
    def retries_waiting(self) -> int:
        """Partitions waiting out a backoff before they are queued again."""
        return len(self._retries)

    async def fail_exhausted(self) -> None:
        """Fail the jobs with a partition out of attempts, rather than resuming them for ever."""
        access = self._access
        for job in await access.run(access.journal.fail_exhausted, self._retry.max_attempts):
            self._metrics.job_ended(job)
            log.error("job failed: %s", job.error, extra={"job": job.id})

    async def resume(self) -> int:
        """`fail_exhausted`, then queue what the journal holds unfinished; how many jobs were
        resumed."""
        await self.fail_exhausted()
        access = self._access
        jobs = await access.run(access.journal.incomplete)
        for job, pending in jobs:
            self.enqueue(job, pending)
        return len(jobs)

    async def submit(self, partitions: int, params: dict[str, Any], priority: int) -> JobRecord:
        """Journal a job (durable on return), then queue its partitions. BacklogFullError if
        they would take the backlog past PACER_API__MAX_BACKLOG: then nothing is journaled.
        ``JournalUnavailable`` while the journal fails, or a call to it hangs: nothing is accepted
        that it cannot hold, and no request waits behind a call that may never return."""
        self._refuse_unless_writable()
        with self._admission.reserve(self._pipeline.backlog, partitions, self._backlog_rate()):
            job = await self._journaled(
                self._access.journal.add_job, partitions, self._workload, params, priority
            )
            self._accepted(job)
        log.info("job accepted: %d partitions", partitions, extra={"job": job.id})
        return job

    async def submit_once(
        self, key: str, partitions: int, params: dict[str, Any], priority: int
    ) -> tuple[JobRecord, bool]:
        """``submit`` under an idempotency key: the job, and whether it is new. A retry of an
        accepted request returns its job whatever the backlog; the same key with another
        request raises IdempotencyConflict."""
        access, name = self._access, self._workload
        found = await access.run(access.journal.job_for_key, key, partitions, name, params,
                                 priority)  # fmt: skip
        if found is not None:
            return found, False
        self._refuse_unless_writable()
        with self._admission.reserve(self._pipeline.backlog, partitions, self._backlog_rate()):
            job, created = await self._journaled(
                access.journal.add_job_once, key, partitions, name, params, priority
            )
            if created:  # else a twin of this request was journaled meanwhile
                self._accepted(job)
        if created:
            log.info("job accepted: %d partitions", partitions, extra={"job": job.id})
        return job, created

    def _refuse_unless_writable(self) -> None:
        """``JournalUnavailable`` while the journal fails or a call to it hangs."""
        access = self._access
        reason = access.health.reason() or next(iter(access.reasons()), None)
        if reason is not None:
            raise JournalUnavailable(f"{reason}: not accepting new jobs")

    async def _journaled(self, call: Callable[..., T], *args: Any) -> T:
        """A write that accepts a job; one the journal cannot take now is the journal's
        failure (unready at once, not at the next commit round), and refuses the job. One
        that has not returned within PACER_JOURNAL__ACCEPT_WAIT_S refuses it too: the write is
        dropped if not begun, and its job deleted should it land later (D147)."""
        gave_up = threading.Event()

        def write() -> T | None:
            return None if gave_up.is_set() else call(*args)

        write.__name__ = getattr(call, "__name__", "write")  # as journal calls are reported

        access, wait_s = self._access, self._access.settings.accept_wait_s
        written = asyncio.ensure_future(access.run(write))
        try:
            done = await asyncio.wait_for(asyncio.shield(written), wait_s)
        except JournalUnavailable as exc:
            access.failed(exc, "accepting a job")
            raise JournalUnavailable(f"{exc}: not accepting new jobs") from exc
        except (TimeoutError, asyncio.CancelledError) as exc:  # cancelled: the request's task
            gave_up.set()
            written.add_done_callback(self._withdraw_late)
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise JournalUnavailable(
                f"the journal did not take the job within {wait_s:g} s "
                "(PACER_JOURNAL__ACCEPT_WAIT_S): not accepted"
            ) from None
        assert done is not None  # only a write the request gave up on returns None
        return done

    def _withdraw_late(self, written: asyncio.Future[Any]) -> None:
        """A write the request gave up on has ended: delete the job it made, if any."""
        if written.cancelled() or written.exception() is not None:
            return
        made = written.result()
        job, created = made if isinstance(made, tuple) else (made, made is not None)
        if job is None or not created:
            return
        log.warning("a job's write returned after its request was refused; deleting the job",
                    extra={"job": job.id})  # fmt: skip
        self._spawn(self._withdraw(job))

    async def _withdraw(self, job: JobRecord) -> None:
        try:
            await self._access.run(self._access.journal.withdraw, job.id)
        except Exception:
            # Left in the journal, the job would run after a restart: queue it now instead.
            log.exception("deleting a job refused late failed; it is queued", extra={"job": job.id})
            self._accepted(job)

    def _accepted(self, job: JobRecord) -> None:
        """A new job is journaled: queue it here, or tell the fleet's claims."""
        if self.to_fleet is None:
            self.enqueue(job, range(job.partitions))
        else:
            self.to_fleet()

    def _backlog_rate(self) -> float | None:
        """Partitions per second leaving the backlog, from the PI controller's estimates: the
        GPUs' rate, or what synthesis can supply where lower; None while unknown (or under a
        baseline)."""
        policy = self._policy()
        if not isinstance(policy, PIController):
            return None
        gpu_s = policy.estimates.gpu_service_s
        if not gpu_s:
            return None
        supply = policy.synthesis_supply_per_s or policy.terms.rate_cap_per_s
        return min(self._pipeline.workers / gpu_s, supply)

    def enqueue(self, job: JobRecord, indices: Iterable[int]) -> None:
        """Queue partitions of ``job`` at its place; a ``range`` or the journal's runs stay
        runs in the backlog."""
        order = self._orders.get(job.id)
        if order is None:
            self._order += 1
            order = self._orders[job.id] = self._order
        seed = job_seed(job.id, job.params)
        self._watchdog.observe()  # work arriving at an idle service starts the stall clock
        self._pipeline.enqueue(job.id, seed, job.params, indices, priority=job.priority,
                               order=order)  # fmt: skip
        self._watchdog.observe()

    async def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued or running job; a finished one is returned as it is, and None if
        there is no such job."""
        access = self._access
        before = await access.run(access.journal.get_job, job_id)
        if before is None:
            return None
        job = await access.run(access.journal.cancel, job_id) or before
        if before.state in LIVE:
            dropped = self._pipeline.cancel(job_id)
            self.ended(job_id)
            self._metrics.job_ended(job)
            log.info("job cancelled, %d partitions dropped", dropped, extra={"job": job_id})
        return job

    def completed(self, jobs: list[JobRecord]) -> None:
        """Jobs whose last result was committed (or that ended with them)."""
        for job in jobs:
            self.ended(job.id)
            if job.state is JobState.COMPLETED:
                self._metrics.job_ended(job)
                log.info("job completed: %s", job.result_digest, extra={"job": job.id})

    def attempt_journaled(
        self, job_id: str, index: int, reason: str, gpu: int | None, attempt: int, job: JobRecord
    ) -> None:
        """A failed attempt is in the journal (its ``attempt``-th; 0 if the job had ended):
        queue the partition again after its backoff, or fail its job once it has had
        PACER_RETRY__MAX."""
        context = {"job": job_id, "partition": index, "gpu": gpu}
        limit = self._retry.max_attempts
        if attempt == 0:  # the job had ended (cancelled, failed by another partition)
            return
        if job.state is JobState.FAILED:
            self._pipeline.cancel(job_id)
            self.ended(job_id)
            self._metrics.job_ended(job)
            log.error("job failed: %s", job.error, extra=context)
            return
        if self._draining():  # pending in the journal, attempts and all, for the next start
            log.warning("attempt %d of %d failed: %s; left to the next start", attempt, limit,
                        reason, extra=context)  # fmt: skip
            return
        delay = self._retry.delay_s(attempt)
        log.warning("attempt %d of %d failed: %s; trying again in %.3g s", attempt, limit,
                    reason, delay, extra=context)  # fmt: skip
        self._metrics.retries.inc()
        self._requeue_later(job_id, index, delay)

    def _requeue_later(self, job_id: str, index: int, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._retries[(job_id, index)] = loop.call_later(
            delay_s, lambda: self._spawn(self._requeue(job_id, index))
        )

    async def _requeue(self, job_id: str, index: int) -> None:
        """A partition's backoff is over: back into the backlog at its job's priority and
        place, if the job is still queued or running. It counts as retrying (`retrying`)
        until it is queued."""
        access = self._access
        try:
            job = await access.run(access.journal.get_job, job_id)
        except Exception as exc:  # the journal's trouble: try again once it may have passed
            access.failed(exc, "reading a job to retry its partition")
            if self._retries.pop((job_id, index), None) is not None and not self._draining():
                self._requeue_later(job_id, index, self._retry.delay_s(1))
            return
        if self._retries.pop((job_id, index), None) is None:  # its job's retries were dropped
            return
        if job is None or job.state not in LIVE or self._draining():
            return
        self.enqueue(job, [index])

    def retrying(self, job_id: str) -> list[int]:
        """The partitions of ``job_id`` that wait out a retry's backoff."""
        return [index for job, index in self._retries if job == job_id]

    def cancel_retries(self, job_id: str | None) -> None:
        """Drop the backoffs of ``job_id`` (of every job if None): those partitions stay
        pending in the journal."""
        for key in [k for k in self._retries if job_id is None or k[0] == job_id]:
            self._retries.pop(key).cancel()

    def ended(self, job_id: str) -> None:
        """Forget what the service kept for a job that ended."""
        self._orders.pop(job_id, None)
        self.cancel_retries(job_id)

    def forget(self, job_id: str) -> None:
        """Forget a job's place in the backlog once none of its partitions waits here (a
        fleet's host that holds no lease of it: the job goes on elsewhere)."""
        if not self._pipeline.waiting(job_id) and not any(
            key[0] == job_id for key in self._retries
        ):
            self._orders.pop(job_id, None)

    async def settle(self) -> None:
        """Wait for the requeues under way (at shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a short task (a partition's requeue after its backoff); an exception that
        escapes it is logged and counted as the ``requeue`` task's failure, never lost."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._short_task_done)

    def _short_task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._supervisor.record_failure("requeue", exc)
