"""The service's lifecycle: construction (no I/O), open, start, drain, close."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from types import EllipsisType
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from pacer.config import Settings
from pacer.control.controller import PIController
from pacer.control.estimates import Estimates
from pacer.control.policy import DispatchPolicy, PolicyConflictError
from pacer.control.registry import build_policy
from pacer.host.memory import HOST_FILES, HostFiles
from pacer.journal import JobRecord, JournalBackend
from pacer.journal.health import Backoff
from pacer.metrics.collectors import Metrics
from pacer.metrics.fleet import FleetMetrics, claim_histogram
from pacer.metrics.health import JournalMetrics
from pacer.pipeline import Pipeline
from pacer.pipeline.attempts import CallLimits, RetrySchedule
from pacer.plan import Plan
from pacer.runtime.supervision import ProgressWatchdog, ReadinessSource, Supervisor
from pacer.service.admission import Admission
from pacer.service.assembly import Progress, check_bind
from pacer.service.commits import Commits
from pacer.service.first_steps import FirstSteps
from pacer.service.fleet_host import Fleet
from pacer.service.jobs import Jobs
from pacer.service.journal_access import JournalAccess
from pacer.service.retention import Retention
from pacer.service.startup import StartupTimes, reported
from pacer.service.stopping import CLOSE, LAST_COMMIT, JournalStop, unless_set
from pacer.workload import Workload

log = logging.getLogger("pacer.service")
T = TypeVar("T")


class Service:
    """One pacer instance: journal, dispatch policy, pipeline, metrics and jobs.

    Construction keeps the settings and ``first_steps`` and does nothing else. `open` takes
    the first steps unless `pacer serve` took them (the journal's lock, the workload, the
    plan), opens the journal and assembles the parts below. `start` prepares the workload
    (its pool pinned from the first steps on) beside the resume of the journal's jobs, and
    starts dispatching; `shutdown` drains and closes. A fleet's host resumes nothing: it
    claims from the shared journal (``fleet``). ``backoff`` paces the retries of failed
    journal writes; ``wall_clock`` stamps an SQLite journal's jobs (retention is guarded
    against its steps: `pacer.service.retention`). `pacer.server.Server` serves the API."""

    # Assembled by `open`.
    workload: Workload
    plan: Plan  # fitted to the host (`FirstSteps.take`)
    policy: DispatchPolicy
    retry: RetrySchedule
    pipeline: Pipeline
    metrics: Metrics
    jobs: Jobs
    commits: Commits
    fleet: Fleet | None = None  # a host of a fleet (PACER_JOURNAL__URL=postgresql://…)
    start_report_s = 10.0  # a start that takes long says what it waits for this often

    def __init__(
        self,
        settings: Settings,
        first_steps: FirstSteps,
        registry: CollectorRegistry | None = None,
        backoff: Backoff | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        check_bind(settings)
        self.settings = settings
        self.registry = registry or CollectorRegistry()
        self.ready = False
        self.draining = False
        self.resumed = 0  # jobs resumed from the journal by `start`
        self.startup = StartupTimes()
        self.clock = clock = first_steps.clock
        self._clock = clock
        self.first_steps = first_steps  # taken by `pacer serve` before its imports, or by `open`
        self.status_listeners: list[Callable[[str], None]] = []  # told what a long start awaits
        self._opened = False
        self._started = False
        self._hurry = asyncio.Event()
        self.journal_access = JournalAccess(settings.journal, clock, backoff or Backoff(),
                                            self.first_steps.lock, wall_clock)  # fmt: skip
        self.journal_stop = JournalStop(self.journal_access, clock)  # how long a stop waits on it
        self.health = self.journal_access.health
        self.admission = Admission(settings.api.max_backlog)
        self.supervisor = Supervisor(clock)
        self.watchdog = ProgressWatchdog(settings.health.stall_s, self._work_waiting, clock)
        # Why /readyz answers 503 beside starting and draining; a component may append itself.
        self.readiness: list[ReadinessSource] = [self.supervisor, self.watchdog, self.health,
                                                 self.journal_access]  # fmt: skip

    @classmethod
    def build(
        cls,
        settings: Settings,
        registry: CollectorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff | None = None,
        host_files: HostFiles = HOST_FILES,
        wall_clock: Callable[[], float] = time.time,
    ) -> Service:
        """A service with first steps of its own, not yet taken (`open` takes them)."""
        return cls(settings, FirstSteps(settings, host_files, clock), registry, backoff,
                   wall_clock)  # fmt: skip

    @property
    def journal(self) -> JournalBackend:
        """The open journal; call it through `db`, on its thread."""
        return self.journal_access.journal

    async def db(self, call: Callable[..., T], *args: Any) -> T:
        """Run a read for the API on the journal's thread (`JournalAccess.read`)."""
        return await self.journal_access.read(call, *args)

    @property
    def policy_name(self) -> str:
        """The dispatch policy running: pi, or a baseline (``PACER_CONTROLLER__POLICY``)."""
        return self.settings.controller.policy

    @property
    def controller(self) -> PIController:
        """The PI controller; PolicyConflictError while a baseline policy dispatches."""
        if isinstance(self.policy, PIController):
            return self.policy
        raise PolicyConflictError(self.policy_name, "only the pi policy has a PI controller")

    def _estimates(self) -> Estimates | None:
        """The PI controller's estimates, which derived call limits scale; a baseline has none."""
        return self.policy.estimates if isinstance(self.policy, PIController) else None

    # -- open ---------------------------------------------------------------------------------

    async def open(self) -> None:
        """Take the first steps where they were not taken (the journal's lock, the workload,
        the plan), open the journal, and assemble the policy (warm from the journal's
        estimates where they fit this start), the pipeline, the metrics and the job
        operations. Nothing runs yet, but a pool the first steps began preparing. Once only;
        `start` opens."""
        if self._opened:
            return
        # The lock first: a second service on the journal refuses at once (JournalInUseError).
        self.first_steps.take()
        self.startup.record("first_steps", self.first_steps.taken_s or 0.0)
        await self.journal_access.retried("opening it at start", self.journal_access.open)
        try:
            await self._assemble()
        except BaseException:
            await self.journal_access.close()
            raise
        self._opened = True

    async def _assemble(self) -> None:
        settings = self.settings
        self.workload, self.plan = self.first_steps.workload, self.first_steps.plan
        estimates = await self.journal_access.saved_estimates(self.plan.estimates_key)
        self.policy = build_policy(settings.controller.policy, settings.controller,
                                   self.plan.caps, self._clock, estimates)  # fmt: skip
        self.retry = RetrySchedule(settings.retry)
        self.pipeline = Pipeline(
            # The pipeline calls only what every DispatchPolicy has (decide, observe_*).
            self.policy, self.workload, self.plan.caps, workers=self.plan.workers,
            budget_bytes=self.plan.budget_bytes,
            on_outcome=lambda outcome: self.commits.on_outcome(outcome),
            verify_every=self.plan.verify_every, verify_threads=self.plan.verify_threads,
            limits=CallLimits(settings.timeouts, self._estimates), clock=self._clock,
        )  # fmt: skip
        self.metrics = Metrics(self.registry, self.pipeline, self.policy_name)
        self.jobs = Jobs(
            self.journal_access, self.pipeline, workload=self.workload.name,
            admission=self.admission, retry=self.retry, metrics=self.metrics,
            watchdog=self.watchdog, supervisor=self.supervisor, policy=lambda: self.policy,
            draining=lambda: self.draining,
        )  # fmt: skip
        self.commits = Commits(
            self.journal_access, self.pipeline, self.jobs, retry=self.retry,
            watchdog=self.watchdog, policy=lambda: self.policy,
            estimates_key=self.plan.estimates_key, clock=self._clock,
            retention=Retention(settings.journal.retention_s, wall=self.journal_access.wall,
                                fleet=settings.journal.fleet),
        )  # fmt: skip
        calls = self.journal_access.calls
        self.registry.register(JournalMetrics(self.health, calls, self.commits.uncommitted))
        if settings.journal.fleet:
            self._assemble_fleet()
        self.supervisor.expect(*(f"prove-{i}" for i in range(self.pipeline.workers)))
        self.pipeline.on_task_failure = self.supervisor.record_failure
        self.readiness.append(self.pipeline.provers.progress)  # no GPU worker making progress
        self.metrics.watch_health(self.supervisor, self.watchdog, self.unready_reasons)
        self.pipeline.observer = Progress(self.metrics, self.watchdog)

    def _assemble_fleet(self) -> None:
        self.fleet = fleet = Fleet(
            self.journal_access, self.pipeline, self.jobs, self.commits,
            claim_max=self.settings.journal.claim_max,
            synthesis_concurrency=lambda: self.plan.caps.synthesis_concurrency,
            claim_seconds=claim_histogram(self.registry), clock=self._clock,
        )  # fmt: skip
        self.jobs.to_fleet = fleet.heard
        self.registry.register(FleetMetrics(fleet))
        self.readiness.append(fleet)

    # -- start --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open if not yet open; prepare the workload (its pool pinned or adopted, begun by
        the first steps unless the journal is a fleet's) and meanwhile resume the jobs the
        journal holds unfinished (completed partitions are not redone), and start the
        pipeline, the commit loop and upkeep. A host of a fleet resumes nothing itself: once
        prepared, it gives back what a previous run of it held and claims. Ready on return;
        ``startup`` says how long each phase took, from the first steps on."""
        async with reported(self._say_starting, self.start_report_s):
            fleet = self.settings.journal.fleet
            if not fleet:  # the pinning first: the journal opens beside it
                self.first_steps.take()
                self.first_steps.begin_prepare()
            await self.startup.timed("open", self.open(), self._clock)
            self.first_steps.begin_prepare()  # where only the open could take the journal's lock
            retried = self.journal_access.retried  # a journal out of reach: not ready, not gone
            if self.fleet is None:
                resuming = retried("resuming jobs", self.jobs.resume)
                # The journal's jobs are resumed while the pool is pinned (or adopted).
                _, self.resumed = await asyncio.gather(
                    self.first_steps.prepared(self.startup),
                    self.startup.timed("resume", resuming, self._clock),
                )
            else:  # no claims held while the pool is not there to work them
                await self.first_steps.prepared(self.startup)
                await self.startup.timed("resume", retried("taking over", self._take_over),
                                         self._clock)  # fmt: skip
        self.startup.ready_s = self._clock() - self.first_steps.began
        self._started = True  # from here on, a drain has work to wait for and commit
        self.journal_access.start(self.supervisor)
        self.pipeline.start(self.supervisor)
        self.commits.start(self.supervisor)
        if self.fleet is not None:
            self.fleet.start(self.supervisor)
        self.ready = True

    def waiting_for(self) -> str:
        """What a start waits for now: the phases running, the journal calls on its threads."""
        now = self._clock()
        calls = [f"journal call {call.name} for {ran_s:.0f} s"
                 for call, ran_s in self.journal_access.calls.running()]  # fmt: skip
        waiting = self.startup.waiting(now)
        return f"{waiting} ({', '.join(calls)})" if calls else waiting

    def _say_starting(self) -> str:
        """What a start that takes long waits for, logged (a journal call that hangs too)."""
        began = self.first_steps.began
        line = (
            f"still starting after {self._clock() - began:.0f} s: waiting for {self.waiting_for()}"
        )
        log.info("%s", line)
        self.journal_access.check_calls()
        for listener in self.status_listeners:
            listener(line)
        return line

    async def _take_over(self) -> None:
        """A fleet's host: fail the jobs out of attempts, give back its last run's, claim."""
        assert self.fleet is not None
        await self.jobs.fail_exhausted()
        await self.fleet.take_over()

    def keep_pool(self) -> None:
        """Hand the pinned pool over to the next pacer, whatever PACER_GPU__KEEP_POOL says."""
        self.first_steps.keep_pool()

    # -- jobs and the controller --------------------------------------------------------------

    async def submit(self, partitions: int, params: dict[str, Any], priority: int) -> JobRecord:
        """`Jobs.submit`: journal a job, then queue its partitions."""
        return await self.jobs.submit(partitions, params, priority)

    async def submit_once(
        self, key: str, partitions: int, params: dict[str, Any], priority: int
    ) -> tuple[JobRecord, bool]:
        """`Jobs.submit_once`: ``submit`` under an idempotency key."""
        return await self.jobs.submit_once(key, partitions, params, priority)

    async def cancel(self, job_id: str) -> JobRecord | None:
        """`Jobs.cancel`: cancel a queued or running job."""
        return await self.jobs.cancel(job_id)

    def uncommitted(self) -> int:
        """Proved partitions whose results wait for the journal."""
        return len(self.journal_access.pending)

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

    # -- readiness ----------------------------------------------------------------------------

    def _work_waiting(self) -> bool:
        """Work this service owes: partitions in the backlog (not while draining: they stay
        for the next start), in flight, or results not yet committed."""
        if not self._opened:
            return False
        p = self.pipeline
        return (p.backlog > 0 and not self.draining) or not p.idle or bool(self.uncommitted())

    def unready_reasons(self) -> list[str]:
        """Why /readyz answers 503: starting or draining, then each readiness source's reasons."""
        if self.draining:
            reasons = ["draining: not accepting work"]
        else:
            reasons = [] if self.ready else ["starting"]
        for source in self.readiness:
            reasons += source.reasons()
        return reasons

    # -- shutdown -----------------------------------------------------------------------------

    def hurry(self) -> None:
        """A second signal: the drain cut short, a wait for the journal too (`JournalStop.cut`)."""
        self._hurry.set()
        self.journal_stop.cut()

    async def shutdown(self) -> bool:
        """Drain and close. True if all in-flight work finished within the drain budget."""
        finished = await self.drain()
        await self.close()
        log.info("stopped")
        return finished

    async def drain(self) -> bool:
        """Stop dispatch, give in-flight work ``PACER_SHUTDOWN__DRAIN_S`` to finish (less if
        hurried), commit what it proved, stop the loops and close the workload; what did not
        finish stays pending in the journal for the next start. True if everything did."""
        self.draining = True
        if not self._opened:  # a start that failed opening, its pool perhaps begun
            await self.first_steps.close(self._hurry, stuck=False)
            return True
        if self.fleet is not None:
            self.fleet.stop_claiming()
        finished = await self._drain_work() if self._started else True
        if self.fleet is not None:
            await self.fleet.close()
        await self.pipeline.close()
        # Bounded only where something may be stuck: a large pinned pool takes its time.
        stuck = not finished or self.pipeline.abandoned_threads > 0
        await self.first_steps.close(self._hurry, stuck=stuck)
        return finished

    async def _drain_work(self) -> bool:
        drain_s = self.settings.shutdown.drain_s
        deadline = self._clock() + drain_s
        log.info("draining: dispatch stopped, %.0f s for in-flight work", drain_s)
        self.jobs.cancel_retries(None)  # partitions waiting out a backoff stay pending
        finished = bool(await unless_set(self._hurry, self.pipeline.drain(drain_s)))
        if self._hurry.is_set():
            deadline = self._clock()  # one commit of what was proved, no retries
            log.warning("drain cut short; %d partitions left to the journal",
                        self.pipeline.inflight)  # fmt: skip
        elif not finished:
            log.warning(
                "drain budget of %.0f s spent; %d partitions left to the journal",
                drain_s, self.pipeline.inflight,
            )  # fmt: skip
        self.supervisor.stop()
        until = max(deadline, self._clock() + self.settings.shutdown.journal_s)
        await self.journal_stop.bounded(self._commit_proved(deadline), until, LAST_COMMIT)
        return finished

    async def _commit_proved(self, deadline: float) -> None:
        """Commit what was proved (retried until ``deadline``); give a fleet's leases back."""
        await self.commits.stop()
        await self.jobs.settle()
        await self.commits.last_commit(deadline)
        if self.fleet is not None:  # what was not started goes to the other hosts at once
            await self.fleet.give_back()

    async def close(self) -> None:
        """Close the journal and give its lock up (after `drain`), within its bound."""
        until = self._clock() + self.settings.shutdown.journal_s
        await self.journal_stop.bounded(self.journal_access.close(), until, CLOSE)
