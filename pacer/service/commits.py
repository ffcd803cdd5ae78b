"""The commit loop: proved results and failed attempts written to the journal in batches.

A failing journal stops nothing that was accepted: what waits is kept in memory, in order, and
its commit retried with backoff (`JournalAccess.backoff`); past ``MAX_UNCOMMITTED`` results
dispatch holds until the journal takes them. Upkeep (saving the estimates, pruning old jobs)
runs beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import asdict, replace

from pacer.control.controller import PIController
from pacer.control.policy import DispatchPolicy
from pacer.journal import JobRecord, LeaseToken, PartitionResult, UnknownJob
from pacer.journal.health import JournalUnavailable
from pacer.journal.records import SYNTHESIS_WAIT, VERIFY
from pacer.pipeline import Outcome, Pipeline
from pacer.pipeline.attempts import RetrySchedule
from pacer.runtime.supervision import ProgressWatchdog, Supervisor
from pacer.service.jobs import Jobs
from pacer.service.journal_access import FailedAttempt, JournalAccess
from pacer.service.retention import Retention

log = logging.getLogger("pacer.service")
UPKEEP_S = 60.0
CLOCK_WATCH_S = 1.0  # between two upkeep rounds, the wall clock is read this often
# Results proved but not committed, held while the journal fails (about 0.6 KiB each: 100,000
# are ~60 MiB). Past that, dispatch holds until the journal takes them: nothing proved is
# durable meanwhile, and more of it would only be more to redo if the process died.
MAX_UNCOMMITTED = 100_000


class Commits:
    """Writes what the pipeline reports to the journal: ``on_outcome`` takes each outcome,
    `start` runs the commit loop and upkeep under a supervisor, `stop` and `last_commit` end
    them at shutdown. ``policy()`` is the policy whose estimates are saved under
    ``estimates_key``; ``retention`` says when finished jobs may be pruned. On a fleet's host,
    ``lease_of(job, index)`` (set by `pacer.service.fleet_host.Fleet`) names the lease the host
    holds now over a partition: a result proved under an older lease of the host's commits
    under it."""

    def __init__(
        self,
        access: JournalAccess,
        pipeline: Pipeline,
        jobs: Jobs,
        *,
        retry: RetrySchedule,
        watchdog: ProgressWatchdog,
        policy: Callable[[], DispatchPolicy],
        estimates_key: str,
        clock: Callable[[], float],
        retention: Retention,
    ) -> None:
        self._access = access
        self._pipeline = pipeline
        self._jobs = jobs
        self._retry = retry
        self._watchdog = watchdog
        self._policy = policy
        self._estimates_key = estimates_key
        self._clock = clock
        self.retention = retention
        self.dispatch_held = False
        self._closing = asyncio.Event()
        self._committer: asyncio.Task[None] | None = None
        self.lease_of: Callable[[str, int], tuple[int, int] | None] | None = None
        self._upkeeper: asyncio.Task[None] | None = None

    def uncommitted(self) -> int:
        """Proved partitions whose results wait for the journal."""
        return len(self._access.pending)

    def start(self, supervisor: Supervisor) -> None:
        """Run the commit loop (task ``journal``) and upkeep (task ``upkeep``)."""
        self._committer = supervisor.start("journal", self._commit_loop)
        self._upkeeper = supervisor.start("upkeep", self._upkeep_loop)

    # -- what the pipeline reports ------------------------------------------------------------

    def on_outcome(self, outcome: Outcome) -> None:
        # No separate write marks a job running: its first committed result does, in the
        # same transaction (Journal.complete_partitions).
        if outcome.error is not None or outcome.proof is None:
            error = outcome.error or "proving returned no proof"
            self.attempt_failed(outcome.job_id, outcome.index, error, outcome.gpu)
            return
        try:
            result = PartitionResult(
                job_id=outcome.job_id,
                index=outcome.index,
                digest=outcome.proof.digest,
                synthesis_s=outcome.synthesis_s,
                gpu_s=outcome.gpu_s,
                phases={
                    **outcome.proof.phases_s,
                    SYNTHESIS_WAIT: outcome.synthesis_wait_s,
                    **({} if outcome.verify_s is None else {VERIFY: outcome.verify_s}),
                },
                gpu=outcome.gpu,
                lease=None if outcome.lease is None else LeaseToken(*outcome.lease),
            )
        except ValueError as exc:  # the pipeline checks proofs; this is the journal's own rule
            reason = f"the journal refuses the result: {exc}"
            self.attempt_failed(outcome.job_id, outcome.index, reason, outcome.gpu)
            return
        pending = self._access.pending
        pending.append(result)
        if len(pending) >= MAX_UNCOMMITTED and not self.dispatch_held:
            self.dispatch_held = True
            self._pipeline.hold(True)
            cause = self._access.health.error
            log.error(
                "dispatch held: %d proved results wait for the journal%s; in-flight work "
                "goes on, dispatch resumes once they are committed",
                len(pending), f" ({cause})" if cause else "",
            )  # fmt: skip

    def awaiting(self, job_id: str) -> set[int]:
        """Partitions of ``job_id`` whose result waits for a commit other than the one running
        now (which may refuse it), or whose failed attempt waits to be journaled or retried."""
        access = self._access
        waiting = {r.index for r in access.pending[access.committing :] if r.job_id == job_id}
        waiting.update(index for job, index in access.failures if job == job_id)
        waiting.update(self._jobs.retrying(job_id))
        return waiting

    def attempt_failed(self, job_id: str, index: int, reason: str, gpu: int | None) -> None:
        """A partition's attempt failed: journal it with the next commit (retried until it
        lands, so the job cannot stay running); then retry the partition or fail its job."""
        self._access.failures.setdefault((job_id, index), []).append(FailedAttempt(reason, gpu))

    # -- the loops ----------------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        """Commit results and failed attempts in batches.

        Never ends on an error: a failed write is counted, logged and retried with backoff,
        and what it held stays queued. Ends when `stop` sets ``_closing``."""
        interval = self._access.settings.commit_interval_s
        failures = 0
        while not self._closing.is_set():
            delay = interval if failures == 0 else self._access.backoff.delay_s(failures)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), delay)
            if self._closing.is_set():
                return
            try:
                await self.flush()
            except Exception as exc:
                failures += 1
                self._access.failed(exc, "committing results")
            else:
                failures = 0
                self._journal_ok()

    async def _upkeep_loop(self) -> None:
        """An upkeep round every ``UPKEEP_S``; meanwhile the wall clock is read every
        ``CLOCK_WATCH_S``, and a step brings the next round forward."""
        while True:
            await self.upkeep()
            waited_s = 0.0
            while waited_s < UPKEEP_S:
                tick_s = min(CLOCK_WATCH_S, UPKEEP_S - waited_s)
                await asyncio.sleep(tick_s)
                waited_s += tick_s
                if self.retention.watch_host():
                    break

    async def upkeep(self) -> None:
        """Save the estimates, look for steps of the wall clocks, complete a fleet's jobs
        whose results are all stored (`FleetBackend.settle`) and pack completed ones'
        results (`FleetBackend.pack`), and prune the finished jobs
        past their retention (`Retention.prune_now`). A journal error is the journal's
        failure (the commit loop tells when it recovers), not this task's."""
        access, retention = self._access, self.retention
        try:
            # Estimates saved as we go, so that even a killed service restarts warm.
            await self.save_estimates()
            retention.watch_host()
            if retention.journal is not None:
                began = retention.steady()
                journal_now = await access.run(access.journal.now)
                retention.watch_journal(journal_now, began, retention.steady())
            fleet = access.fleet
            if fleet is not None:
                # A job whose last commit lost its count (the server crashed, its host died
                # before a retry) would otherwise stay running for ever.
                self._jobs.completed(await access.run(fleet.settle))
                await access.run(fleet.pack)
            now = retention.prune_now()
            if now is not None:
                pruned = await access.run(access.journal.prune, retention.retention_s, now)
                if pruned:
                    log.info("pruned %d finished jobs older than the retention", pruned)
        except Exception as exc:
            access.failed(exc, "saving estimates and pruning finished jobs")

    async def save_estimates(self) -> None:
        """Save the PI controller's estimates, with the key they are valid for. A baseline
        keeps none, nor does a controller that has learned nothing yet: the saved ones stay
        for the next start they fit."""
        policy = self._policy()
        if isinstance(policy, PIController) and policy.estimates.known:
            access = self._access
            await access.run(
                access.journal.save_estimates, asdict(policy.estimates), self._estimates_key
            )

    def _journal_ok(self) -> None:
        self._access.succeeded()
        if self.dispatch_held and len(self._access.pending) < MAX_UNCOMMITTED:
            self.dispatch_held = False
            self._pipeline.hold(False)
            log.warning("dispatch resumed: the journal takes results again")

    # -- a commit -----------------------------------------------------------------------------

    async def flush(self) -> None:
        """Commit what waits: proved partitions, then failed ones. On a journal error it
        raises, and what did not land stays queued, in order, for the next attempt (the
        journal ignores a result it already has, so a repeat is harmless). While the journal
        fails and nothing waits, a probe write tells when it takes writes again. One flush at
        a time: the commit loop's, then the last commit's."""
        access = self._access
        await access.run(access.journal.check_file)
        wrote = False
        if access.pending:
            # The batch stays in ``pending`` until written, so that MAX_UNCOMMITTED and the
            # metric count it during the commit too; results proved meanwhile join the end.
            self._under_leases_held(access.pending)
            batch = list(access.pending)
            access.committing = len(batch)
            try:
                ended = await access.run(self._commit, batch)
            except _PartialCommit as partial:
                del access.pending[: len(batch) - len(partial.left)]
                self._jobs.completed(partial.ended)
                cause = partial.__cause__
                raise JournalUnavailable(f"journal {access.settings.location}: {cause}") from cause
            finally:
                access.committing = 0
            del access.pending[: len(batch)]
            self._jobs.completed(ended)
            self._watchdog.progress()
            wrote = True
        while access.failures:
            (job_id, index), attempts = next(iter(access.failures.items()))
            while attempts:
                await self._commit_failure(job_id, index, attempts[0])
                attempts.pop(0)
            del access.failures[(job_id, index)]
            wrote = True
        if not wrote and not access.health.healthy:
            await access.run(access.journal.probe)

    def _under_leases_held(self, results: list[PartitionResult]) -> None:
        """On a fleet's host: each result under the lease the host holds over its partition
        now, where that is another than it was proved under (the host lost that lease, then
        claimed the partition again): the result is not refused, nor the partition proved
        again."""
        if self.lease_of is None:
            return
        for i, result in enumerate(results):
            held = self.lease_of(result.job_id, result.index)
            if held is not None and held != result.lease:
                results[i] = replace(result, lease=LeaseToken(*held))

    def _commit(self, batch: list[PartitionResult]) -> list[JobRecord]:
        """On the journal's thread: commit a batch; one bad result must not lose the others.
        A journal error in the one-by-one pass raises ``_PartialCommit``: what it committed,
        and what is left."""
        journal = self._access.journal
        try:
            return journal.complete_partitions(batch)
        except (UnknownJob, ValueError) as exc:
            log.error("journal refused a batch (%s); committing one by one", exc)
        ended: list[JobRecord] = []
        for i, item in enumerate(batch):
            try:
                ended += journal.complete_partitions([item])
            except (UnknownJob, ValueError) as exc:
                context = {"job": item.job_id, "partition": item.index}
                log.error("result dropped: %s", exc, extra=context)
            except journal.Error as exc:
                raise _PartialCommit(ended, batch[i:]) from exc
        return ended

    async def _commit_failure(self, job_id: str, index: int, failed: FailedAttempt) -> None:
        """Journal one failed attempt, then let the jobs retry the partition or fail its job.
        A journal error propagates: the attempt stays queued for the commit loop's next
        round."""
        access = self._access
        reason, gpu = failed.reason, failed.gpu
        try:
            attempt, job = await access.run(access.journal.record_attempt, job_id, index, reason,
                                            gpu, self._retry.max_attempts)  # fmt: skip
        except (UnknownJob, ValueError) as exc:
            log.warning("attempt failed (%s) and was not journaled: %s", reason, exc,
                        extra={"job": job_id, "partition": index, "gpu": gpu})  # fmt: skip
            return
        self._jobs.attempt_journaled(job_id, index, reason, gpu, attempt, job)

    # -- shutdown -----------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop upkeep, and the commit loop once the round it is in is over: a write that hangs
        holds it until the stop leaves the journal (`pacer.service.stopping`)."""
        self._closing.set()
        if self._upkeeper is not None:
            self._upkeeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._upkeeper
        if self._committer is not None:
            try:
                await self._committer
            except asyncio.CancelledError:
                pass
            except Exception:
                log.exception("the commit loop had ended on an error")

    async def last_commit(self, deadline: float) -> None:
        """Commit what waits, retrying with backoff while the drain budget lasts, then save
        the estimates. What is left is logged (by the stop, if it left the journal): it stays
        pending in the journal."""
        access = self._access
        failures = 0
        while (access.pending or access.failures) and not access.left:
            try:
                await self.flush()
            except Exception as exc:
                failures += 1
                access.failed(exc, "committing before exit")
                delay = access.backoff.delay_s(failures)
                if self._clock() + delay > deadline:
                    break
                await access.sleep(delay)
            else:
                self._journal_ok()
        if access.health.healthy and not access.left:
            try:
                await self.save_estimates()
            except Exception as exc:
                access.failed(exc, "saving the estimates")
        if (access.pending or access.failures) and not access.left:
            log.error(
                "exiting with %d results and %d failed attempts not committed to the journal "
                "(%s): those partitions stay pending there and are proved again on the next "
                "start",
                len(access.pending), sum(map(len, access.failures.values())),
                access.health.error,
            )  # fmt: skip


class _PartialCommit(Exception):  # noqa: N818 - carries data, never leaves the service
    """A journal error part-way through committing results one by one."""

    def __init__(self, ended: list[JobRecord], left: list[PartitionResult]) -> None:
        super().__init__(f"{len(left)} results left")
        self.ended = ended
        self.left = left
