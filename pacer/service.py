"""The service's lifecycle: start-up, serving, SIGTERM drain, shutdown.

start: open the journal, restore the controller's estimates, load the workload, resume the jobs
the journal holds unfinished (completed partitions are not redone), start the pipeline and the
HTTP API, then report ready (``READY=1`` to systemd when ``NOTIFY_SOCKET`` is set).

The first SIGTERM or SIGINT drains: ``/readyz`` fails and new jobs get 503, dispatch stops,
in-flight partitions may finish within ``PACER_SHUTDOWN__DRAIN_S``, results and estimates are
committed, and the process exits 0; what did not finish stays in the journal for the next
start. A second signal exits at once (status 1); the journal loses nothing it had committed.
A call that hangs does not hold the exit: its thread is a daemon, and the workload's close
gets at most ``CLOSE_WORKLOAD_S`` when calls are still in flight or hung.

A partition whose attempt failed (raised, timed out, a proof unfit to journal, a failed
verification) has the reason journaled and is queued again at its job's place after a backoff
(``PACER_RETRY__*``); after ``PACER_RETRY__MAX`` its job fails, naming it.

The dispatch loop, the commit loop and upkeep run under a ``Supervisor`` (restarted after a
failure); ``/readyz`` answers 503 with ``unready_reasons()``: starting, draining, a task down,
stalled (``ProgressWatchdog``), and what any other readiness source says.

A failing journal (disk full, I/O errors, a lock held elsewhere, the file deleted) stops
nothing that was accepted: results wait in memory and their commit is retried with backoff;
meanwhile ``/readyz`` and ``POST /v1/jobs`` answer 503 with the reason. A drain tries to commit
them within its budget and exits 0 either way: what was not committed stays pending in the
journal and is proved again on the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from types import EllipsisType
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry

from pacer.admission import Admission
from pacer.api import build_runner
from pacer.attempts import Call, CallLimits, RetrySchedule
from pacer.config import Settings
from pacer.controller import PIController
from pacer.estimates import Estimates
from pacer.host_memory import MEMINFO, HostMemory, bytes_text
from pacer.journal import (
    JobRecord,
    JobState,
    JournalBackend,
    JournalLock,
    PartitionRecord,
    PartitionResult,
    PartitionSummary,
    UnknownJob,
    open_journal,
)
from pacer.journal_health import Backoff, JournalHealth, JournalUnavailable
from pacer.metrics import JournalMetrics, Metrics
from pacer.pipeline import Observer, Outcome, Pipeline
from pacer.plan import ConfigurationError, Plan, host_room, resolve
from pacer.policies import build_policy
from pacer.policy import PolicyConflictError
from pacer.supervision import ProgressWatchdog, ReadinessSource, Supervisor
from pacer.threads import DaemonPool
from pacer.workload import Pool, Workload, job_seed, load_workload, pooled

log = logging.getLogger("pacer.service")
T = TypeVar("T")
SWITCH_INTERVAL_S = 0.001
GC_YOUNG_THRESHOLD = 50_000
UPKEEP_S = 60.0
CLOSE_WORKLOAD_S = 30.0  # the workload's close at shutdown (pool, processes): then exit anyway
LAST_FAILURES = 5  # failed attempts a job's detail lists, newest first
# Results proved but not committed, held while the journal fails (about 0.6 KiB each: 100,000
# are ~60 MiB). Past that, dispatch holds until the journal takes them: nothing proved is
# durable meanwhile, and more of it would only be more to redo if the process died.
MAX_UNCOMMITTED = 100_000


def check_bind(settings: Settings) -> None:
    """Refuse a non-loopback address without a token, unless explicitly allowed."""
    host = settings.api.host
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and settings.api.token is None and not settings.api.allow_public:
        raise ConfigurationError(
            f"PACER_API__HOST={host} is not a loopback address: set PACER_API__TOKEN, or "
            "PACER_API__ALLOW_PUBLIC=true to serve it without authentication"
        )


def sd_notify(message: str) -> bool:
    """Send ``message`` to systemd's notify socket, if there is one (sd_notify protocol)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(address)
            sock.sendall(message.encode())
        except OSError as exc:
            log.warning("sd_notify failed: %s", exc)
            return False
    return True


class Service:
    """One pacer instance: journal, dispatch policy, pipeline, metrics and API.

    Holds the journal's lock from construction to the end of `shutdown`; ``backoff`` paces
    the retries of journal writes that fail."""

    def __init__(
        self,
        settings: Settings,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
        meminfo: Path = MEMINFO,
    ) -> None:
        check_bind(settings)
        self._meminfo = meminfo  # read by start, to fit the memory budget to the host
        # One service per journal, taken first so that a second one refuses at once: it would
        # resume and prove the same jobs (JournalInUseError names the holder).
        self._lock = JournalLock(settings.journal.path)
        self._lock.acquire()
        try:
            self._build(settings, registry, clock, backoff)
        except BaseException:
            self._lock.release()
            raise

    def _build(
        self,
        settings: Settings,
        registry: CollectorRegistry | None,
        clock: Callable[[], float],
        backoff: Backoff | None,
    ) -> None:
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.ready = False
        self.draining = False
        self.port: int | None = None
        self._clock = clock
        self._backoff = backoff or Backoff()
        self.health = JournalHealth(clock)
        self._pending: list[PartitionResult] = []  # proved, to commit, in order
        # Failed attempts to journal, by partition, oldest first (retried until they land).
        self._failures: dict[tuple[str, int], list[_FailedAttempt]] = {}
        self._dispatch_held = False
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._committer: asyncio.Task[None] | None = None
        self._upkeeper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._order = 0
        self._orders: dict[str, int] = {}  # job → its place in the backlog, kept for retries
        self._retries: dict[tuple[str, int], asyncio.TimerHandle] = {}  # waiting out a backoff
        self.admission = Admission(settings.api.max_backlog)
        self.workload: Workload = load_workload(settings)
        # As configured until start reads the host's memory (`_fit_memory_to_host`).
        self.plan: Plan = resolve(settings, self.workload)
        # The journal lives on a thread of its own: an fsync must never stall the event loop.
        self._db = ThreadPoolExecutor(1, "pacer-journal")
        try:
            self.journal: JournalBackend = self._db.submit(
                open_journal, settings.journal, time.time
            ).result()
            estimates = self._saved_estimates()
        except BaseException:
            self._db.shutdown()
            raise
        self.policy = build_policy(settings.controller.policy, settings.controller,
                                   self.plan.caps, clock, estimates)  # fmt: skip
        self.retry = RetrySchedule(settings.retry)
        self.pipeline = Pipeline(
            # The pipeline calls only what every DispatchPolicy has (decide, observe_*).
            self.policy,
            self.workload,
            self.plan.caps,
            workers=self.plan.workers,
            budget_bytes=self.plan.budget_bytes,
            on_outcome=self._on_outcome,
            verify_every=self.plan.verify_every,
            limits=CallLimits(settings.timeouts, self._estimates),
            clock=clock,
        )
        self.metrics = Metrics(self.registry, self.pipeline, self.policy_name)
        self.registry.register(JournalMetrics(self.health, self.uncommitted))
        self.supervisor = Supervisor(clock)
        self.watchdog = ProgressWatchdog(settings.health.stall_s, self._work_waiting, clock)
        # Why /readyz answers 503, beside starting and draining: each source lists its reasons,
        # and a component with an opinion of its own appends itself.
        self.readiness: list[ReadinessSource] = [self.supervisor, self.watchdog, self.health]
        self.supervisor.expect(*(f"prove-{i}" for i in range(self.pipeline.workers)))
        self.pipeline.on_task_failure = self.supervisor.record_failure
        self.metrics.watch_health(self.supervisor, self.watchdog, self.unready_reasons)
        self.pipeline.observer = _Progress(self.metrics, self.watchdog)

    def _saved_estimates(self) -> Estimates | None:
        """The estimates the journal holds, if they were saved under this host's and
        workload's key; others describe another regime, and a cold start is better."""
        saved = self._db.submit(self.journal.load_estimates).result()
        if saved is None:
            return None
        key = self._db.submit(self.journal.load_estimates_key).result()
        if key != self.plan.estimates_key:
            log.info(
                "saved estimates not used: saved for %s, this start is %s",
                key or "an unrecorded workload", self.plan.estimates_key,
            )  # fmt: skip
            return None
        return _estimates(saved)

    @property
    def policy_name(self) -> str:
        """The dispatch policy running: pi, or a baseline (``PACER_CONTROLLER__POLICY``)."""
        return self.settings.controller.policy

    def _estimates(self) -> Estimates | None:
        """The PI controller's estimates, which derived call limits scale; a baseline has none."""
        return self.policy.estimates if isinstance(self.policy, PIController) else None

    @property
    def controller(self) -> PIController:
        """The PI controller; PolicyConflictError while a baseline policy dispatches."""
        if isinstance(self.policy, PIController):
            return self.policy
        raise PolicyConflictError(self.policy_name, "only the pi policy has a PI controller")

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        # The loop shares the GIL with synthesis and proving threads; by default a thread may
        # keep it 5 ms before the loop gets a turn, which is loop lag. 1 ms keeps lag low.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self._fit_memory_to_host()
        await self._prepare_workload()
        resumed = await self._resume()
        self.pipeline.start(self.supervisor)
        self._committer = self.supervisor.start("journal", self._commit_loop)
        self._upkeeper = self.supervisor.start("upkeep", self._upkeep_loop)
        self._runner = build_runner(self)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.api.host, self.settings.api.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.ready = True
        # Start-up objects (modules, settings, the resumed backlog) live as long as the process:
        # keep them out of the collector's full passes, which otherwise stall the loop.
        gc.freeze()
        # Young collections every 700 allocations land inside one dispatch decision in twenty
        # at thousands of partitions/s; fifty thousand makes them rare, each still ~1 ms.
        gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
        log.info(
            "pacer ready on http://%s:%d (workload %s, policy %s, %d workers, %d jobs resumed)",
            self.settings.api.host, self.port, self.workload.name, self.policy_name,
            self.pipeline.workers, resumed,
        )  # fmt: skip
        sd_notify(f"READY=1\nSTATUS=serving on port {self.port}, {resumed} jobs resumed")

    def _fit_memory_to_host(self) -> None:
        """Fit the plan to the host, read now: the budget at most MemAvailable less the reserve.

        A budget larger than that is clamped to it, with a warning: partitions in flight
        could otherwise take the host into the OOM killer (the default 64 GiB on a smaller
        host is the common case, and it must still start). Not one partition fitting, or a
        pinned pool larger than that, is a ConfigurationError (`pacer.plan.resolve`). Without
        /proc/meminfo the budget stays as configured."""
        try:
            host = HostMemory.read(self._meminfo)
        except (OSError, ValueError) as exc:
            log.warning("cannot read the host's memory (%s): the memory budget "
                        "(PACER_MEMORY__BUDGET_BYTES) is not checked against it", exc)  # fmt: skip
            return
        configured = self.plan
        self.plan = plan = resolve(self.settings, self.workload, host)
        if not plan.memory.clamped:
            return
        budget, partition_bytes = plan.memory.configured_budget_bytes, plan.partition_bytes
        log.warning(
            "the memory budget (PACER_MEMORY__BUDGET_BYTES=%d, %s) is more than the host can "
            "give: %s; the budget in effect is clamped to that, %d partitions of %s in flight "
            "instead of %d, so that they cannot take the host into the OOM killer",
            budget, bytes_text(budget), host_room(plan.memory), plan.caps.inflight_partitions,
            bytes_text(partition_bytes), configured.caps.inflight_partitions,
        )  # fmt: skip
        # Nothing has driven the policy yet: built again on the caps in effect (its estimates
        # kept), it is what the pipeline dispatches by and the metrics read. One put in the
        # pipeline's place before start (a test's) is left as it is.
        if self.pipeline.controller is self.policy:
            self.policy = build_policy(self.policy_name, self.settings.controller, plan.caps,
                                       self._clock, self._estimates())  # fmt: skip
            self.pipeline.controller = self.policy
        self.pipeline.caps = plan.caps
        self.pipeline.budget_bytes = plan.budget_bytes

    async def _prepare_workload(self) -> None:
        """Let a pooled workload allocate its pool for the whole run, on a thread and before
        readiness (pinning host memory runs at about 2 GiB/s), with the plan's slots."""
        workload = pooled(self.workload)
        if workload is None:
            return
        plan = self.plan
        slots, wanted, gib = plan.pool_slots, plan.pool_slots_wanted, plan.partition_bytes / 2**30
        if not self.settings.gpu.pool_slots and slots < wanted:
            log.warning(
                "the memory budget (PACER_MEMORY__BUDGET_BYTES, %.1f GiB) holds %d partitions "
                "of %.2f GiB, fewer than the %d (%.1f GiB) that every synthesis the cores allow, "
                "the ready buffer and the proving workers keep in flight: the GPUs may wait on "
                "synthesis; raise the budget if the host has the memory",
                plan.budget_bytes / 2**30, slots, gib, wanted, wanted * gib,
            )  # fmt: skip
        log.info("pinning %d pool slots of %.2f GiB before ready", slots, gib)
        started = self._clock()
        await asyncio.get_running_loop().run_in_executor(
            None, workload.prepare, slots, plan.budget_bytes, plan.caps.synthesis_concurrency
        )
        pool = workload.pool
        log.info(
            "pinned pool ready: %d slots, %.1f GiB in %.1f s",
            slots, (pool.total_bytes if pool else 0) / 2**30, self._clock() - started,
        )  # fmt: skip

    async def shutdown(self) -> bool:
        """Drain and stop. True if all in-flight work finished within the drain budget."""
        self.draining = True
        sd_notify("STOPPING=1\nSTATUS=draining")
        drain_s = self.settings.shutdown.drain_s
        deadline = self._clock() + drain_s
        log.info("draining: dispatch stopped, %.0f s for in-flight work", drain_s)
        self._cancel_retries(None)  # partitions waiting out a backoff stay pending in the journal
        finished = await self.pipeline.drain(drain_s)
        if not finished:
            log.warning(
                "drain budget of %.0f s spent; %d partitions left to the journal",
                drain_s, self.pipeline.inflight,
            )  # fmt: skip
        self.supervisor.stop()
        await self._stop_committer(deadline)
        if self._upkeeper is not None:
            self._upkeeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._upkeeper
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._last_commit(deadline)
        await self.pipeline.close()
        # Bounded only where something may be stuck: a large pinned pool takes its time to free.
        await self._close_workload(bounded=not finished or self.pipeline.abandoned_threads > 0)
        if self._runner is not None:
            await self._runner.cleanup()
        await self._close_journal()
        log.info("stopped")
        return finished

    async def _close_workload(self, *, bounded: bool) -> None:
        """The workload's close (the pinned pool, synthesis processes) on a daemon thread;
        ``bounded``, when calls are still in flight or hung, for at most CLOSE_WORKLOAD_S: a
        close stuck behind a hung call must not hold the exit, and the process's end frees
        what it held (pool blocks left in /dev/shm are removed at the next start)."""
        closer = DaemonPool(1, "pacer-close")
        try:
            await asyncio.wait_for(asyncio.wrap_future(closer.submit(self.workload.close)),
                                   CLOSE_WORKLOAD_S if bounded else None)  # fmt: skip
        except TimeoutError:
            log.error("the workload's close took over %.0f s; exiting without it (a hung call?)",
                      CLOSE_WORKLOAD_S)  # fmt: skip
        except Exception:
            log.exception("the workload's close failed")
        finally:
            closer.shutdown()

    async def _stop_committer(self, deadline: float) -> None:
        """Let the commit loop finish the round it is in (a write waits at most the busy
        timeout for a lock), then stop it."""
        self._closing.set()
        if self._committer is None:
            return
        grace_s = max(deadline - self._clock(), self.settings.journal.busy_timeout_s + 1.0)
        done, _ = await asyncio.wait({self._committer}, timeout=grace_s)
        if not done:
            log.warning("journal write still running after %.1f s; abandoned", grace_s)
            self._committer.cancel()
        try:
            await self._committer
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("the commit loop had ended on an error")

    async def _last_commit(self, deadline: float) -> None:
        """Commit what waits, retrying with backoff while the drain budget lasts, then save
        the estimates. What is left is logged: it stays pending in the journal."""
        failures = 0
        while self._pending or self._failures:
            try:
                await self._flush()
            except Exception as exc:
                failures += 1
                self._journal_failed(exc, "committing before exit")
                delay = self._backoff.delay_s(failures)
                if self._clock() + delay > deadline:
                    break
                await asyncio.sleep(delay)
            else:
                self._journal_ok()
        if self.health.healthy:
            try:
                await self._save_estimates()
            except Exception as exc:
                self._journal_failed(exc, "saving the estimates")
        if self._pending or self._failures:
            log.error(
                "exiting with %d results and %d failed attempts not committed to the journal "
                "(%s): those partitions stay pending there and are proved again on the next "
                "start",
                len(self._pending), sum(map(len, self._failures.values())), self.health.error,
            )  # fmt: skip

    async def _close_journal(self) -> None:
        try:
            await self.db(self.journal.close)
        except Exception as exc:
            log.warning("closing the journal: %s", exc)
        self._db.shutdown()
        self._lock.release()

    async def db(self, call: Callable[..., T], *args: Any) -> T:
        """Run a journal call on the journal's thread. ``JournalUnavailable`` when the journal
        cannot do it now (locked, disk full, I/O error: its ``OperationalError``)."""
        try:
            return await asyncio.wrap_future(self._db.submit(call, *args))
        except self.journal.OperationalError as exc:
            raise JournalUnavailable(f"journal {self.settings.journal.path}: {exc}") from exc

    # -- journal health -------------------------------------------------------------------------

    def uncommitted(self) -> int:
        """Proved partitions whose results wait for the journal."""
        return len(self._pending)

    def _journal_failed(self, exc: BaseException, doing: str) -> None:
        """Count a failed journal write, and log it when it starts a failing spell (with the
        exception), changes error, or has been repeating quietly for a while."""
        error = str(exc) or type(exc).__name__
        if not self.health.failed(error):
            return
        attempts = sum(map(len, self._failures.values()))
        waiting = f"{len(self._pending)} results and {attempts} failed attempts"
        if self.health.failures_in_spell == 1:
            log.error("journal write failed while %s: %s; %s wait in memory, retrying",
                      doing, error, waiting, exc_info=exc)  # fmt: skip
        else:
            log.error(
                "journal still failing after %d attempts over %.0f s: %s; %s wait in memory",
                self.health.failures_in_spell, self.health.failing_s(), error, waiting,
            )  # fmt: skip

    def _journal_ok(self) -> None:
        failed_for = self.health.succeeded()
        if failed_for is not None:
            log.warning("journal recovered after %.1f s of failures", failed_for)
        if self._dispatch_held and len(self._pending) < MAX_UNCOMMITTED:
            self._dispatch_held = False
            self.pipeline.hold(False)
            log.warning("dispatch resumed: the journal takes results again")

    async def _resume(self) -> int:
        # A job with a partition out of attempts fails rather than being resumed for ever.
        for job in await self.db(self.journal.fail_exhausted, self.retry.max_attempts):
            self.metrics.job_ended("failed")
            log.error("job failed: %s", job.error, extra={"job": job.id})
        jobs = await self.db(self.journal.incomplete)
        for job, pending in jobs:
            self._enqueue(job, pending)
        return len(jobs)

    # -- jobs ---------------------------------------------------------------------------------

    async def submit(self, partitions: int, params: dict[str, Any], priority: int) -> JobRecord:
        """Journal a job (durable on return), then queue its partitions. BacklogFullError if
        they would take the backlog past PACER_API__MAX_BACKLOG: then nothing is journaled.
        ``JournalUnavailable`` while the journal fails: nothing is accepted that it cannot hold."""
        reason = self.health.reason()
        if reason is not None:
            raise JournalUnavailable(f"{reason}: not accepting new jobs")
        with self.admission.reserve(self.pipeline.backlog, partitions, self._backlog_rate()):
            try:
                job = await self.db(
                    self.journal.add_job, partitions, self.workload.name, params, priority
                )
            except JournalUnavailable as exc:
                self._journal_failed(exc, "accepting a job")
                raise JournalUnavailable(f"{exc}: not accepting new jobs") from exc
            self._enqueue(job, range(partitions))
        log.info("job accepted: %d partitions", partitions, extra={"job": job.id})
        return job

    async def submit_once(
        self, key: str, partitions: int, params: dict[str, Any], priority: int
    ) -> tuple[JobRecord, bool]:
        """``submit`` under an idempotency key: the job, and whether it is new. A retry of an
        accepted request returns its job whatever the backlog; the same key with another
        request raises IdempotencyConflict."""
        name = self.workload.name
        found = await self.db(self.journal.job_for_key, key, partitions, name, params, priority)
        if found is not None:
            return found, False
        with self.admission.reserve(self.pipeline.backlog, partitions, self._backlog_rate()):
            job, created = await self.db(
                self.journal.add_job_once, key, partitions, name, params, priority
            )
            if created:  # else a twin of this request was journaled meanwhile
                self._enqueue(job, range(partitions))
        if created:
            log.info("job accepted: %d partitions", partitions, extra={"job": job.id})
        return job, created

    def _backlog_rate(self) -> float | None:
        """Partitions per second leaving the backlog, from the PI controller's estimates: the
        GPUs' rate, or synthesis's cap where lower; None while unknown (or under a baseline)."""
        if not isinstance(self.policy, PIController):
            return None
        gpu_s = self.policy.estimates.gpu_service_s
        if not gpu_s:
            return None
        return min(self.pipeline.workers / gpu_s, self.policy.terms.rate_cap_per_s)

    def _enqueue(self, job: JobRecord, indices: Iterable[int]) -> None:
        """Queue partitions of ``job`` at its place; a ``range`` or the journal's runs stay
        runs in the backlog."""
        order = self._orders.get(job.id)
        if order is None:
            self._order += 1
            order = self._orders[job.id] = self._order
        seed = job_seed(job.id, job.params)
        self.watchdog.observe()  # work arriving at an idle service starts the stall clock
        self.pipeline.enqueue(job.id, seed, job.params, indices, priority=job.priority, order=order)
        self.watchdog.observe()

    def _work_waiting(self) -> bool:
        """Work this service owes: partitions in the backlog (not while draining: they stay
        for the next start), in flight, or results not yet committed."""
        p = self.pipeline
        return (p.backlog > 0 and not self.draining) or not p.idle or bool(self._pending)

    def unready_reasons(self) -> list[str]:
        """Why /readyz answers 503: starting or draining, then every readiness source's
        reasons (tasks down or crash-looping, a stall, ...); empty when ready."""
        if self.draining:
            reasons = ["draining: not accepting work"]
        else:
            reasons = [] if self.ready else ["starting"]
        for source in self.readiness:
            reasons += source.reasons()
        return reasons

    async def cancel(self, job_id: str) -> dict[str, Any] | None:
        """Cancel a queued or running job; a finished one is returned as it is."""
        before = await self.db(self.journal.get_job, job_id)
        if before is None:
            return None
        job = await self.db(self.journal.cancel, job_id) or before
        if before.state in (JobState.QUEUED, JobState.RUNNING):
            dropped = self.pipeline.cancel(job_id)
            self._ended(job_id)
            self.metrics.job_ended("cancelled")
            log.info("job cancelled, %d partitions dropped", dropped, extra={"job": job_id})
        return _job_json(job)

    def _on_outcome(self, outcome: Outcome) -> None:
        # No separate write marks a job running: its first committed result does, in the
        # same transaction (Journal.complete_partitions).
        if outcome.error is not None or outcome.proof is None:
            error = outcome.error or "proving returned no proof"
            self._attempt_failed(outcome.job_id, outcome.index, error, outcome.gpu)
            return
        try:
            result = PartitionResult(
                job_id=outcome.job_id,
                index=outcome.index,
                digest=outcome.proof.digest,
                synthesis_s=outcome.synthesis_s,
                gpu_s=outcome.gpu_s,
                phases=outcome.proof.phases_s,
                gpu=outcome.gpu,
            )
        except ValueError as exc:  # the pipeline checks proofs; this is the journal's own rule
            reason = f"the journal refuses the result: {exc}"
            self._attempt_failed(outcome.job_id, outcome.index, reason, outcome.gpu)
            return
        self._pending.append(result)
        if len(self._pending) >= MAX_UNCOMMITTED and not self._dispatch_held:
            self._dispatch_held = True
            self.pipeline.hold(True)
            log.error(
                "dispatch held: %d proved results wait for the journal%s; in-flight work "
                "goes on, dispatch resumes once they are committed",
                len(self._pending), f" ({self.health.error})" if self.health.error else "",
            )  # fmt: skip

    def _attempt_failed(self, job_id: str, index: int, reason: str, gpu: int | None) -> None:
        """A partition's attempt failed: journal it with the next commit (retried until it
        lands, so the job cannot stay running); then retry the partition or fail its job."""
        self._failures.setdefault((job_id, index), []).append(_FailedAttempt(reason, gpu))

    async def _commit_failure(self, job_id: str, index: int, failed: _FailedAttempt) -> None:
        """Journal one failed attempt; queue the partition again after the backoff, or fail
        its job once it has had PACER_RETRY__MAX. A journal error propagates: the
        attempt stays queued for the commit loop's next round."""
        reason, gpu = failed.reason, failed.gpu
        context = {"job": job_id, "partition": index, "gpu": gpu}
        limit = self.retry.max_attempts
        try:
            attempt, job = await self.db(self.journal.record_attempt, job_id, index, reason,
                                         gpu, limit)  # fmt: skip
        except (UnknownJob, ValueError) as exc:
            log.warning("attempt failed (%s) and was not journaled: %s", reason, exc,
                        extra=context)  # fmt: skip
            return
        if attempt == 0:  # the job had ended (cancelled, failed by another partition)
            return
        if job.state is JobState.FAILED:
            self.pipeline.cancel(job_id)
            self._ended(job_id)
            self.metrics.job_ended("failed")
            log.error("job failed: %s", job.error, extra=context)
            return
        if self.draining:  # pending in the journal, attempts and all, for the next start
            log.warning("attempt %d of %d failed: %s; left to the next start", attempt, limit,
                        reason, extra=context)  # fmt: skip
            return
        delay = self.retry.delay_s(attempt)
        log.warning("attempt %d of %d failed: %s; trying again in %.3g s", attempt, limit,
                    reason, delay, extra=context)  # fmt: skip
        self.metrics.retries.inc()
        self._requeue_later(job_id, index, delay)

    def _requeue_later(self, job_id: str, index: int, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._retries[(job_id, index)] = loop.call_later(
            delay_s, lambda: self._spawn(self._requeue(job_id, index))
        )

    async def _requeue(self, job_id: str, index: int) -> None:
        """A partition's backoff is over: back into the backlog at its job's priority and
        place, if the job is still queued or running."""
        self._retries.pop((job_id, index), None)
        try:
            job = await self.db(self.journal.get_job, job_id)
        except Exception as exc:  # the journal's trouble: try again once it may have passed
            self._journal_failed(exc, "reading a job to retry its partition")
            if not self.draining:
                self._requeue_later(job_id, index, self.retry.delay_s(1))
            return
        if job is None or job.state not in (JobState.QUEUED, JobState.RUNNING) or self.draining:
            return
        self._enqueue(job, [index])

    def _cancel_retries(self, job_id: str | None) -> None:
        """Drop the backoffs of ``job_id`` (of every job if None): those partitions stay
        pending in the journal."""
        for key in [k for k in self._retries if job_id is None or k[0] == job_id]:
            self._retries.pop(key).cancel()

    def _ended(self, job_id: str) -> None:
        """Forget what the service kept for a job that failed or was cancelled."""
        self._orders.pop(job_id, None)
        self._cancel_retries(job_id)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a short task (a partition's requeue after its backoff); an exception that
        escapes it is logged and counted as the ``requeue`` task's failure, never lost."""
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._short_task_done)

    def _short_task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self.supervisor.record_failure("requeue", exc)

    async def _commit_loop(self) -> None:
        """Commit results and failed attempts in batches.

        Never ends on an error: a failed write is counted, logged and retried with backoff,
        and what it held stays queued. Ends when shutdown sets ``_closing``."""
        interval = self.settings.journal.commit_interval_s
        failures = 0
        while not self._closing.is_set():
            delay = interval if failures == 0 else self._backoff.delay_s(failures)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay)
            if self._closing.is_set():
                return
            try:
                await self._flush()
            except Exception as exc:
                failures += 1
                self._journal_failed(exc, "committing results")
            else:
                failures = 0
                self._journal_ok()

    async def _upkeep_loop(self) -> None:
        """Every ``UPKEEP_S``, save the estimates and prune old jobs. A journal error is the
        journal's failure (the commit loop tells when it recovers), not this task's."""
        while True:
            try:
                await self._upkeep()
            except Exception as exc:
                self._journal_failed(exc, "saving estimates and pruning finished jobs")
            await asyncio.sleep(UPKEEP_S)

    async def _upkeep(self) -> None:
        # Estimates saved as we go, so that even a killed service restarts warm.
        await self._save_estimates()
        pruned = await self.db(self.journal.prune, self.settings.journal.retention_s)
        if pruned:
            log.info("pruned %d finished jobs older than the retention", pruned)

    async def _save_estimates(self) -> None:
        """Save the PI controller's estimates, with the key they are valid for. A baseline
        keeps none, nor does a controller that has learned nothing yet: the saved ones stay
        for the next start they fit."""
        if isinstance(self.policy, PIController) and self.policy.estimates.known:
            await self.db(
                self.journal.save_estimates, asdict(self.policy.estimates), self.plan.estimates_key
            )

    async def _flush(self) -> None:
        """Commit what waits: proved partitions, then failed ones. On a journal error it
        raises, and what did not land stays queued, in order, for the next attempt (the
        journal ignores a result it already has, so a repeat is harmless). While the journal
        fails and nothing waits, a probe write tells when it takes writes again."""
        await self.db(self.journal.check_file)
        wrote = False
        if self._pending:
            batch, self._pending = self._pending, []
            try:
                ended = await self.db(self._commit, batch)
            except _PartialCommit as partial:
                self._pending[:0] = partial.left
                self._jobs_ended(partial.ended)
                cause = partial.__cause__
                raise JournalUnavailable(
                    f"journal {self.settings.journal.path}: {cause}"
                ) from cause
            except BaseException:
                self._pending[:0] = batch
                raise
            self._jobs_ended(ended)
            self.watchdog.progress()
            wrote = True
        while self._failures:
            (job_id, index), attempts = next(iter(self._failures.items()))
            while attempts:
                await self._commit_failure(job_id, index, attempts[0])
                attempts.pop(0)
            del self._failures[(job_id, index)]
            wrote = True
        if not wrote and not self.health.healthy:
            await self.db(self.journal.probe)

    def _jobs_ended(self, jobs: list[JobRecord]) -> None:
        for job in jobs:
            self._ended(job.id)
            if job.state is JobState.COMPLETED:
                self.metrics.job_ended("completed")
                log.info("job completed: %s", job.result_digest, extra={"job": job.id})

    def _commit(self, batch: list[PartitionResult]) -> list[JobRecord]:
        """On the journal's thread: commit a batch; one bad result must not lose the others.
        A journal error in the one-by-one pass raises ``_PartialCommit``: what it committed,
        and what is left."""
        try:
            return self.journal.complete_partitions(batch)
        except (UnknownJob, ValueError) as exc:
            log.error("journal refused a batch (%s); committing one by one", exc)
        ended: list[JobRecord] = []
        for i, item in enumerate(batch):
            try:
                ended += self.journal.complete_partitions([item])
            except (UnknownJob, ValueError) as exc:
                context = {"job": item.job_id, "partition": item.index}
                log.error("result dropped: %s", exc, extra=context)
            except self.journal.Error as exc:
                raise _PartialCommit(ended, batch[i:]) from exc
        return ended

    # -- views ----------------------------------------------------------------------------------

    async def list_jobs(self, state: str | None, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` jobs, newest first, as JSON objects built on the journal's thread."""
        if state is not None and state not in {s.value for s in JobState}:
            raise ValueError(f"state must be one of {', '.join(s.value for s in JobState)}")
        chosen = JobState(state) if state else None
        return await self.db(lambda: [_job_json(j) for j in self.journal.list_jobs(chosen, limit)])

    async def job_detail(self, job_id: str, page: int) -> dict[str, Any] | None:
        """The job, counts of its partitions by state with its first failures, and its first
        ``page`` partitions (``partitions_next_offset``: where the next page starts, or None);
        None if there is no such job. Built on the journal's thread, never the whole job."""

        def build() -> dict[str, Any] | None:
            job = self.journal.get_job(job_id)
            if job is None:
                return None
            summary = self.journal.partition_summary(job_id)
            records = self.journal.partition_page(job_id, 0, page)
            return {
                **_job_json(job),
                "partitions_summary": _summary_json(summary),
                "last_failures": [asdict(a) for a in self.journal.failures(job_id, LAST_FAILURES)],
                "partition_results": [_partition_json(p) for p in records],
                "partitions_next_offset": page if job.partitions > page else None,
            }

        try:
            return await self.db(build)
        except UnknownJob:  # pruned between two reads
            return None

    async def partition_page(self, job_id: str, offset: int, limit: int) -> dict[str, Any] | None:
        """Partitions ``offset`` to ``offset + limit - 1`` of a job, pending ones included, with
        ``next_offset`` (None after the last); None if there is no such job."""

        def build() -> dict[str, Any] | None:
            job = self.journal.get_job(job_id)
            if job is None:
                return None
            records = self.journal.partition_page(job_id, offset, limit)
            end = offset + limit
            return {
                "id": job_id,
                "partitions": job.partitions,
                "offset": offset,
                "limit": limit,
                "next_offset": end if end < job.partitions else None,
                "partition_results": [_partition_json(p) for p in records],
            }

        try:
            return await self.db(build)
        except UnknownJob:
            return None

    def controller_state(self) -> dict[str, Any]:
        """The dispatch policy: its name, mode, interval (s) and bootstrap counters; under pi
        also the controller's settings, terms and estimates."""
        policy = self.policy
        state: dict[str, Any] = {
            "policy": self.policy_name,
            "mode": policy.mode.value,
            "interval_s": policy.interval_s(),
            "bootstraps": policy.bootstraps,
            "rebootstraps": policy.rebootstraps,
        }
        if isinstance(policy, PIController):
            state["settings"] = policy.settings.model_dump()
            state["terms"] = policy.terms._asdict()
            state["estimates"] = asdict(policy.estimates)
        return state

    def retune(self, changes: dict[str, Any], manual: float | EllipsisType | None) -> None:
        """Apply new gains/limits (bumpless) and, unless ``manual`` is ``...``, set or clear a
        manual interval. PolicyConflictError under a baseline policy: it has neither."""
        if not isinstance(self.policy, PIController):
            retuning = bool(changes) or isinstance(manual, EllipsisType)
            rule = "can be retuned" if retuning else "has a manual mode"
            raise PolicyConflictError(self.policy_name, f"only the pi policy {rule}")
        if changes:
            self.policy.retune(**changes)
        if not isinstance(manual, EllipsisType):
            self.policy.set_manual(manual)
            changes = {**changes, "manual_interval_s": manual}
        log.info("controller retuned: %s", changes)

    async def status(self) -> dict[str, Any]:
        p = self.pipeline
        counts = await self.db(self.journal.counts)
        reasons = self.unready_reasons()
        return {
            "ready": not reasons,
            "draining": self.draining,
            "reasons": reasons,
            "health": {
                "since_progress_s": round(self.watchdog.since_progress_s(), 3),
                "stalled_s": round(self.watchdog.stalled_s(), 3),
                "stall_s": self.watchdog.stall_s,
                "task_failures": self.supervisor.failures(),
            },
            "workload": self.workload.name,
            "plan": self.plan.as_dict(),
            "controller": self.controller_state(),
            "queues": {
                "backlog": p.backlog,
                "synthesizing": p.synthesizing,
                "ready": p.ready,
                "proving": p.gpu_busy,
                "verifying": p.verifying,
            },
            "memory": {
                "budget_bytes": p.budget_bytes,  # in effect: clamped to the host's at start
                **self.plan.memory.as_dict(),
                "inflight_bytes": p.inflight_bytes,
                "partition_bytes": self.plan.partition_bytes,
                "caps": asdict(self.plan.caps),
            },
            "pool": _pool_json(p.pool),
            "calls": {
                # What a call may take now (s), and what became of those that took longer.
                "limits_s": p.limits.limits(),
                "hung": dict(p.hung_calls),
                "abandoned_threads": p.abandoned_threads,
                "abandoned_bytes": p.abandoned_bytes,
                "live_workers": p.live_workers,
            },
            "retry": {**self.settings.retry.model_dump(), "waiting": len(self._retries)},
            "synthesis": {
                # Where synthesis runs: the GPU path's setting; the CPU workloads use threads.
                "executor": self.plan.executor,
                # How the ntt workload computes it (numba or numpy); None for other workloads.
                "kernel": self.plan.kernel,
                "restarts": p.synthesis_restarts,
            },
            "gpus": [
                {
                    "gpu": g,
                    "workers": p.workers_on(g),
                    "busy_ratio": round(p.busy_ratio(g), 4),
                    "busy_seconds": round(p.busy_seconds(g), 3),
                }
                for g in p.gpus
            ],
            "jobs": {state.value: n for state, n in counts.items()},
            "journal": {
                "healthy": self.health.healthy,
                "failing_s": round(self.health.failing_s(), 3),
                "error": self.health.error,
                "uncommitted_results": self.uncommitted(),
                "dispatch_held": self._dispatch_held,
            },
        }


class _Progress:
    """The pipeline's observer: the metrics, with each synthesis and proof reported to the
    watchdog as progress."""

    def __init__(self, metrics: Observer, watchdog: ProgressWatchdog) -> None:
        self._metrics = metrics
        self._watchdog = watchdog

    def synthesized(self, seconds: float) -> None:
        self._watchdog.progress()
        self._metrics.synthesized(seconds)

    def proved(self, gpu: int, gpu_s: float, phases_s: dict[str, float]) -> None:
        self._watchdog.progress()
        self._metrics.proved(gpu, gpu_s, phases_s)

    def idle_gap(self, gpu: int, seconds: float) -> None:
        self._metrics.idle_gap(gpu, seconds)

    def finished(self, outcome: Outcome) -> None:
        self._metrics.finished(outcome)

    def hung_call(self, call: Call) -> None:
        self._metrics.hung_call(call)


class _PartialCommit(Exception):  # noqa: N818 - carries data, never leaves the service
    """A journal error part-way through committing results one by one."""

    def __init__(self, ended: list[JobRecord], left: list[PartitionResult]) -> None:
        super().__init__(f"{len(left)} results left")
        self.ended = ended
        self.left = left


@dataclass(frozen=True)
class _FailedAttempt:
    """A failed attempt of a partition, waiting to be journaled."""

    reason: str
    gpu: int | None


def _estimates(saved: dict[str, float | None] | None) -> Estimates | None:
    """The controller's estimates as the journal saved them (a restart starts warm)."""
    if not saved or saved.get("gpu_service_s") is None or saved.get("synthesis_s") is None:
        return None
    return Estimates(
        saved["gpu_service_s"], saved["synthesis_s"], saved.get("synthesis_sd_s") or 0.0
    )


def _pool_json(pool: Pool | None) -> dict[str, Any]:
    if pool is None:
        return {"total_bytes": 0, "in_use_bytes": 0}
    return {
        "backend": pool.backend,
        "total_bytes": pool.total_bytes,
        "in_use_bytes": pool.in_use_bytes,
        "slots_total": pool.slots_total,
        "slots_free": pool.slots_free,
        "checkouts": pool.checkouts,
        "waits": pool.waits,
        "fallbacks": pool.fallbacks,
        "allocations_after_warmup": pool.allocations_after_warmup,
    }


def _job_json(job: JobRecord) -> dict[str, Any]:
    out = asdict(job)
    out["state"] = job.state.value
    return out


def _partition_json(record: PartitionRecord) -> dict[str, Any]:
    out = asdict(record)
    del out["job_id"]
    out["state"] = record.state.value
    return out


def _summary_json(summary: PartitionSummary) -> dict[str, Any]:
    return {
        "pending": summary.pending,
        "completed": summary.completed,
        "failed": summary.failed,
        "first_failures": [{"index": i, "error": e} for i, e in summary.first_failures],
    }


class _Signals:
    """First SIGTERM/SIGINT: set ``stop``. Second: exit at once. Restores the old handlers."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.received: list[int] = []

    def _handle(self, signum: int) -> None:
        self.received.append(signum)
        if len(self.received) > 1:
            log.warning("second signal: exiting now")
            os._exit(1)
        log.info("signal %s: draining", signal.Signals(signum).name)
        self.stop.set()

    @contextlib.contextmanager
    def installed(self) -> Iterator[_Signals]:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._handle, signum)
        try:
            yield self
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)


async def serve(settings: Settings) -> int:
    """Run the service until SIGTERM/SIGINT; the process exit status."""
    service = Service(settings)
    with _Signals().installed() as signals:
        await service.start()
        await signals.stop.wait()
        await service.shutdown()
    return 0


def run(settings: Settings) -> int:
    """``pacer serve``: the service on uvloop."""
    import uvloop

    return uvloop.run(serve(settings))
