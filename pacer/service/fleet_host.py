"""A host of a fleet: partitions claimed from the journal the fleet shares, held under leases it
renews, given back at a drain, and word of new work heard from the other hosts.

The controller stays this host's and sees only the local backlog. What it dispatches from it is
claimed ahead: when the backlog falls below half of the claim target (this host's synthesis
concurrency, or what it dispatched over the last `CLAIM_HORIZON_S` where more, at most
``PACER_JOURNAL__CLAIM_MAX``), a claim tops it up, on a thread of its own (never the commit
thread). A claim that finds nothing waits for word of work (LISTEN/NOTIFY: a job accepted or leases
given back anywhere) or a poll, backing off to `IDLE_POLL_MAX_S`. Leases are renewed every third of
the lease, by their tokens (D187); a lease missing from a renewal was reclaimed, finished or its
job ended (cancelled on another host): its partitions not yet started leave the backlog, and those
in flight are not proved (`HeldLeases.gate`), or if proved are not stored (the database checks each
result's lease token as it commits). After a claim whose answer was lost, the leases of this host's
name it does not know are given back before the next claim (D188).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from pacer.journal import Claim, FleetBackend, HostInUseError, JobRecord
from pacer.journal.health import Backoff, JournalUnavailable
from pacer.metrics.fleet import FleetCounts
from pacer.pipeline import Pipeline
from pacer.ranges import IndexRanges
from pacer.runtime.supervision import Supervisor
from pacer.runtime.threads import DaemonPool
from pacer.service.commits import Commits
from pacer.service.fleet_calls import running_jobs, timed_claim
from pacer.service.held_leases import Held, HeldLeases
from pacer.service.jobs import Jobs
from pacer.service.journal_access import JournalAccess

log = logging.getLogger("pacer.service")
T = TypeVar("T")

CLAIM_HORIZON_S = 0.5  # a host claims ahead about what it dispatched over this long
RENEWALS_PER_LEASE = 3
LISTEN_WAIT_S = 0.5  # one wait for word of work; a drain waits at most this for the listener
IDLE_POLL = Backoff(first_s=0.02, max_s=1.0, jitter=0.2)  # after claims that found nothing
IDLE_POLL_MAX_S = IDLE_POLL.max_s


class Fleet:
    """This host's part in a fleet: claims into ``pipeline``'s backlog (through ``jobs``),
    leases renewed and given back, word of work heard. ``synthesis_concurrency()`` is the
    plan's cap in force (start may fit it to the host); ``claim_seconds(s)`` observes each
    claim's time. Readiness: `reasons`."""

    def __init__(
        self,
        access: JournalAccess,
        pipeline: Pipeline,
        jobs: Jobs,
        commits: Commits,
        *,
        claim_max: int,
        synthesis_concurrency: Callable[[], int],
        claim_seconds: Callable[[float], None],
        clock: Callable[[], float],
    ) -> None:
        self._access = access
        self._pipeline = pipeline
        self._jobs = jobs
        self._commits = commits
        self._claim_max = claim_max
        self._synthesis_concurrency = synthesis_concurrency
        self._claim_seconds = claim_seconds
        self._clock = clock
        self.counts = FleetCounts()
        self.leases = HeldLeases(clock)
        pipeline.provers.gate = self.leases.gate
        pipeline.on_refused = self._refused
        commits.lease_of = self.leases.lease_of
        self._records: dict[str, JobRecord] = {}  # jobs this host holds leases of
        self._unresolved: list[Claim] = []  # claimed, their jobs not read yet
        self._answer_lost = False  # a claim failed: the database may have leased all the same
        self._claimed_at = 0.0  # when the claim of those was sent (s, on the clock)
        self._recent: deque[tuple[float, int]] = deque()  # (time, dispatched) at claims
        self._claiming = False
        self._claim_lock = asyncio.Lock()
        self._low = asyncio.Event()  # the backlog may be below the claim's low-water mark
        self._heard = asyncio.Event()  # word of work, from any host
        self._renewed_at: float | None = None
        self._name_lost: str | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._threads = {
            name: DaemonPool(1, f"pacer-{name}") for name in ("claims", "leases", "listen")
        }

    @property
    def journal(self) -> FleetBackend:
        return self._access.fleet_journal

    @property
    def host(self) -> str:
        return self.journal.host

    @property
    def lease_s(self) -> float:
        return self.journal.lease_s

    @property
    def held(self) -> dict[int, Held]:
        """The leases this host holds, by batch."""
        return self.leases.held

    def refused_results(self) -> int:
        """Results the journal did not store: their leases were no longer this host's."""
        return self.journal.refused_results

    # -- start and stop -----------------------------------------------------------------------

    async def take_over(self) -> int:
        """At start: give back what a previous run of this host held (its leases outlive it
        until they lapse); how many partitions."""
        given = await self._call("leases", self.journal.release, self.host)
        self._renewed_at = self._clock()
        if given:
            log.info("gave back %d partitions a previous run of %s held", given, self.host)
        return given

    def start(self, supervisor: Supervisor) -> None:
        """Claim (task ``claim``), renew (``lease``) and listen (``listen``)."""
        self._claiming = True
        self._pipeline.after_dispatch = self._dispatched
        self._tasks = [
            supervisor.start("claim", self._claim_loop),
            supervisor.start("lease", self._lease_loop),
            supervisor.start("listen", self._listen_loop),
        ]

    def stop_claiming(self) -> None:
        """Claim nothing more (a drain); leases are still renewed for the work in flight."""
        self._claiming = False
        self._low.set()

    def heard(self) -> None:
        """Word of work: a job was accepted here (the notification is on its way too)."""
        self._heard.set()

    async def give_back(self) -> None:
        """After a drain's last commit: stop renewing and give back every lease, so that
        other hosts prove at once what this one did not start."""
        await self._stop_tasks()
        try:
            given = await self._call("leases", self.journal.release, self.host)
        except JournalUnavailable as exc:
            log.warning("leases not given back (%s): other hosts take them once they lapse, "
                        "within %g s", exc, self.lease_s)  # fmt: skip
            return
        self.leases.clear()
        log.info("gave back %d partitions to the fleet", given)

    async def close(self) -> None:
        """Stop the tasks and let the threads go: daemons, not waited for (the listener's wait
        ends within `LISTEN_WAIT_S`; a call that hangs, with the process)."""
        await self._stop_tasks()
        for thread in self._threads.values():
            thread.shutdown()

    async def _stop_tasks(self) -> None:
        self._claiming = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # -- readiness ----------------------------------------------------------------------------

    def since_renewal_s(self) -> float:
        """Seconds since the leases were last renewed (or taken over at start); 0 before."""
        return 0.0 if self._renewed_at is None else self._clock() - self._renewed_at

    def reasons(self) -> list[str]:
        """Not ready while another pacer holds this host's name, or while the leases have not
        been renewed for longer than a lease (other hosts may be proving them)."""
        reasons = [] if self._name_lost is None else [self._name_lost]
        late_s = self.since_renewal_s()
        if self._tasks and late_s > self.lease_s:
            reasons.append(
                f"fleet: leases not renewed for {late_s:.0f} s, more than the lease "
                f"({self.lease_s:g} s): other hosts may take this host's partitions"
            )
        return reasons

    # -- claims -------------------------------------------------------------------------------

    def target(self) -> int:
        """How many partitions the backlog is topped up to: the synthesis concurrency, or
        what was dispatched over the last `CLAIM_HORIZON_S` where more, within
        ``claim_max``."""
        recent = self._recent
        horizon = self._clock() - CLAIM_HORIZON_S
        while len(recent) > 1 and recent[0][0] < horizon:
            recent.popleft()
        rate = self._pipeline.dispatched - recent[0][1] if recent else 0
        return max(1, min(self._claim_max, max(self._synthesis_concurrency(), rate)))

    def _wanted(self) -> int:
        """Partitions to claim now: none while the backlog holds half the target or more (or
        claiming is off, or dispatch is held); else the target less the backlog."""
        if not self._claiming or self._name_lost is not None or not self._pipeline.dispatching:
            return 0
        target, backlog = self.target(), self._pipeline.backlog
        return target - backlog if backlog < max(1, target // 2) else 0

    def _dispatched(self) -> None:
        """After each round of the dispatch loop: wake the claims if the backlog runs low."""
        if not self._low.is_set() and self._wanted():
            self._low.set()

    async def _claim_loop(self) -> None:
        empty = failures = 0
        while True:
            wanted = self._wanted()
            if not wanted and not self._unresolved and not self._answer_lost:
                self._low.clear()
                await self._low.wait()
                continue
            self._heard.clear()
            try:
                got = await self.claim(wanted)
            except JournalUnavailable as exc:
                failures += 1
                self._access.failed(exc, "claiming partitions")
                await asyncio.sleep(self._access.backoff.delay_s(failures))
                continue
            failures = 0
            if got:
                empty = 0
                continue
            empty += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(IDLE_POLL.delay_s(empty)):
                    await self._heard.wait()

    async def claim(self, n: int) -> int:
        """Claim up to ``n`` partitions (none but those claimed earlier whose jobs could not
        be read then, if any wait) and queue them; how many. One at a time (D188)."""
        async with self._claim_lock:
            if self._answer_lost and not self._unresolved:
                await self._give_back_unknown()
            if not self._unresolved and n > 0:
                self._claimed_at = self._clock()
                self._recent.append((self._claimed_at, self._pipeline.dispatched))
                try:
                    self._unresolved = await self._call("claims", timed_claim, self.journal, n,
                                                        self._claim_seconds)  # fmt: skip
                except JournalUnavailable:
                    self._answer_lost = True  # it may have leased partitions all the same
                    raise
                self.counts.claims += 1
                claimed = sum(len(c.pending) for c in self._unresolved)
                self.counts.claimed_partitions += claimed
                self.counts.empty_claims += claimed == 0
            claims = self._unresolved
            unknown = sorted({c.job_id for c in claims} - self._records.keys())
            if unknown:
                self._records |= await self._call("claims", running_jobs, self.journal, unknown)
            self._unresolved = []
            return sum(self._hold(claim) for claim in claims)

    async def _give_back_unknown(self) -> None:
        """After a claim whose answer was lost, give back the leases of this host's name it does
        not know (none renews them). It runs between claims, on their thread: none is in flight."""
        known = [held.token for held in self.held.values()]
        given = await self._call("claims", self.journal.release, self.host, known)
        self._answer_lost = False
        self.counts.unknown_given_back += given
        if given:
            log.warning("gave back %d partitions leased by a claim whose answer was lost", given)

    def _hold(self, claim: Claim) -> int:
        """Queue a claim's partitions and keep its lease; how many (0 for a job that ended,
        whose leases the journal drops)."""
        job = self._records.get(claim.job_id)
        if job is None:
            return 0
        if claim.reclaimed_from is not None:
            self.counts.reclaimed_partitions += len(claim.pending)
            log.info("reclaimed %d partitions from %s, whose lease had lapsed",
                     len(claim.pending), claim.reclaimed_from, extra={"job": job.id})  # fmt: skip
        deadline = self._claimed_at + self.lease_s
        before = self.held.get(claim.batch)  # the run, claimed again after this host lost it
        self.leases.hold(claim.batch, Held(job.id, claim.pending, claim.token, deadline))
        if before is not None:
            self._left(before)
        # A partition this host has already is not queued again: one in flight is proved
        # under this lease (`HeldLeases.gate`), one proved is committed under it
        # (`Commits.lease_of`), and a failed one is retried.
        self._jobs.enqueue(job, IndexRanges.without(claim.pending, self._commits.awaiting(job.id)))
        return len(claim.pending)

    # -- leases -------------------------------------------------------------------------------

    async def _lease_loop(self) -> None:
        """Renew every third of the lease; after a failed renewal, again as the journal's
        backoff allows, so that leases are renewed within their grace once a server is back."""
        period_s = self.lease_s / RENEWALS_PER_LEASE
        failures = 0
        while True:
            delay = period_s if not failures else self._access.backoff.delay_s(failures)
            await asyncio.sleep(min(period_s, delay))
            failures = 0 if await self.renew() else failures + 1

    async def renew(self) -> bool:
        """Renew this host's leases; drop from the backlog what those it lost held. Whether the
        renewal went through."""
        # By token: a lease claimed while the renewal is out is not judged by its answer.
        known = {lease.token: batch for batch, lease in self.held.items()}
        tokens = [*known, *(claim.token for claim in self._unresolved)]
        sent = self._clock()
        try:
            kept = set(await self._call("leases", self.journal.renew, self.host, tokens))
        except JournalUnavailable as exc:
            self.counts.renewal_failures += 1
            self._access.failed(exc, "renewing the fleet's leases")
            return False
        self._renewed_at = self._clock()
        self.leases.renewed(kept, sent + self.lease_s)
        for token, batch in known.items():
            lease = self.held.get(batch)
            if token not in kept and lease is not None and lease.token == token:
                self._lost(batch)
        back, dropped = self.leases.take_back()
        for job_id, indices in back.items():
            self._jobs.enqueue(self._records[job_id], indices)
        if back or dropped:
            log.info("after the renewal, %d partitions set aside at a GPU are queued again, "
                     "%d left to the fleet", sum(map(len, back.values())), dropped)  # fmt: skip
        return True

    def _refused(self, job_id: str, index: int) -> None:
        """A GPU was not given this partition: its lease had lapsed, or was lost."""
        self.counts.unproved_partitions += 1
        log.warning("not proved: its lease is past its deadline or lost; the next renewal "
                    "says whose it is", extra={"job": job_id, "partition": index})  # fmt: skip
        self.leases.set_aside(job_id, index)

    def _lost(self, batch: int) -> None:
        """A lease is no longer this host's: reclaimed after it lapsed, finished, or its job
        ended. Its partitions not started leave the backlog (but for those another lease of
        this host holds again); those in flight finish."""
        self._left(self.leases.drop(batch))

    def _left(self, lease: Held) -> None:
        """What `_lost` does once a lease is gone (or claimed again, with what it holds now)."""
        gone = IndexRanges.of(lease.pending)
        others = [held for held in self.held.values() if held.job_id == lease.job_id]
        for held in others:
            for start, stop in held.pending.runs():
                gone.discard(start, stop)
        dropped = self._pipeline.discard(lease.job_id, gone)
        if dropped:
            self.counts.lost_leases += 1
            log.warning("lease lost: %d partitions not started are left to the fleet",
                        dropped, extra={"job": lease.job_id})  # fmt: skip
        # A claim reading its jobs may hold a run of this job: the record stays for `_hold`.
        if not others and all(claim.job_id != lease.job_id for claim in self._unresolved):
            self._records.pop(lease.job_id, None)
            self._jobs.forget(lease.job_id)

    def leased_partitions(self) -> int:
        """Partitions of the leases this host holds, as claimed."""
        return self.leases.partitions()

    # -- word of work -------------------------------------------------------------------------

    async def _listen_loop(self) -> None:
        failures = 0
        while True:
            try:
                heard = await self._call("listen", self.journal.wait_for_work, LISTEN_WAIT_S)
            except HostInUseError as exc:
                failures += 1
                if self._name_lost is None:
                    log.error("%s; this host claims nothing until it has its name back", exc)
                self._name_lost = str(exc)
            except JournalUnavailable:
                failures += 1  # the commits and renewals report the journal's trouble
            else:
                if self._name_lost is not None:
                    log.warning("host name %s held again: claiming resumes", self.host)
                    self._name_lost = None
                    self._low.set()
                failures = 0
                if heard:
                    self._heard.set()
                continue
            await asyncio.sleep(self._access.backoff.delay_s(failures))

    async def _call(self, thread: str, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` on one of the fleet's threads (`JournalAccess.run_on`)."""
        return await self._access.run_on(self._threads[thread], call, *args)
