"""`JournalBackend`: what the service asks of its job journal, whatever stores it.

A backend keeps every write durable when its method returns, answers with the records of
`pacer.journal.records`, and runs its checks (`pacer.journal.checks`) before it writes: a bad
argument raises ``ValueError`` or `UnknownJob` and writes nothing. Its calls are made from one
thread. Its own errors are of the classes it names, as a DB-API connection does (PEP 249):
``OperationalError`` when it cannot do a call now (locked, disk full, I/O error, connection
lost), which the service retries; ``Error`` for any of its errors. `SqliteJournal` is one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

from pacer.journal.records import (
    Attempt,
    JobKey,
    JobRecord,
    JobState,
    PartitionRecord,
    PartitionResult,
    PartitionSummary,
)
from pacer.ranges import IndexRanges


@runtime_checkable
class JournalBackend(Protocol):
    """The job journal as the service uses it: jobs, their partitions' results and failed
    attempts, idempotency keys, the controller's saved estimates, and its own health."""

    Error: ClassVar[type[Exception]]
    OperationalError: ClassVar[type[Exception]]

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(
        self, partitions: int, workload: str | None, params: dict[str, Any], priority: int = 0
    ) -> JobRecord:
        """Journal a queued job; higher ``priority`` resumes first."""
        ...

    def add_job_once(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> tuple[JobRecord, bool]:  # fmt: skip
        """``add_job`` under an idempotency key: the job, and whether it is new;
        `IdempotencyConflict` if the key names a job of another request."""
        ...

    def job_for_key(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> JobRecord | None:  # fmt: skip
        """The job ``key`` names if it was added with this request, None if the key is new;
        `IdempotencyConflict` if it was added with another. Writes nothing."""
        ...

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued or running job; a finished one as is; None if unknown."""
        ...

    def get_job(self, job_id: str) -> JobRecord | None:
        """The job with this id, or None."""
        ...

    def list_jobs(self, state: JobState | None = None, limit: int = 100) -> list[JobRecord]:
        """Up to ``limit`` jobs, newest first; only those in ``state`` if given."""
        ...

    def jobs_page(
        self, state: JobState | None, limit: int, after: JobKey | None = None
    ) -> tuple[list[JobRecord], JobKey | None]:
        """A page of ``list_jobs`` from the job after ``after`` (the key the page before gave),
        with the key of its last job, or None after the last page. Jobs added meanwhile
        never shift a page."""
        ...

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present)."""
        ...

    def incomplete(self) -> list[tuple[JobRecord, IndexRanges]]:
        """Queued and running jobs, higher priority then older first, each with its partitions
        not yet completed: what a restarted service dispatches again."""
        ...

    def prune(self, retention_s: float, now: float | None = None) -> int:
        """Delete finished jobs last updated over ``retention_s`` before the journal's clock
        now, or before ``now`` where that is earlier (a clock the caller trusts: see
        `pacer.service.retention`); how many."""
        ...

    def withdraw(self, job_id: str) -> bool:
        """Delete job ``job_id`` and its rows: one whose acceptance was never answered (the
        write that added it returned after the request gave up); whether it was there."""
        ...

    def now(self) -> float:
        """The journal's clock: the wall-clock seconds it stamps jobs with now."""
        ...

    # -- partitions ---------------------------------------------------------------------------
    def complete_partitions(self, items: Iterable[PartitionResult]) -> list[JobRecord]:
        """Journal proved partitions at once, all or none; the jobs this completed."""
        ...

    def record_attempt(
        self, job_id: str, index: int, reason: str, gpu: int | None, max_attempts: int
    ) -> tuple[int, JobRecord]:
        """Journal a failed attempt; its number (0: the job is finished) and the job, failed
        once that is ``max_attempts``."""
        ...

    def fail_exhausted(self, max_attempts: int) -> list[JobRecord]:
        """Fail the active jobs with a partition that has had ``max_attempts`` attempts."""
        ...

    def failures(self, job_id: str, limit: int = 5) -> list[Attempt]:
        """The job's last ``limit`` failed attempts, newest first."""
        ...

    def partition_page(self, job_id: str, offset: int, limit: int) -> list[PartitionRecord]:
        """The job's partitions ``offset`` to ``offset + limit - 1``, pending ones included."""
        ...

    def partition_summary(self, job_id: str, failures: int = 5) -> PartitionSummary:
        """Counts of the job's partitions by state and its first ``failures`` failures."""
        ...

    # -- estimates ----------------------------------------------------------------------------
    def save_estimates(self, values: Mapping[str, float | None], key: str | None = None) -> None:
        """Store the controller's estimates (s, None if unknown) with what they are valid for."""
        ...

    def load_estimates(self) -> dict[str, float | None] | None:
        """The estimates last saved, or None."""
        ...

    def load_estimates_key(self) -> str | None:
        """What the saved estimates are valid for, or None."""
        ...

    # -- health -------------------------------------------------------------------------------
    def check_file(self) -> None:
        """Raise if what is written now would not be read by the next start (the SQLite file
        deleted or replaced: `JournalFileGoneError`); nothing where that cannot happen."""
        ...

    def probe(self) -> None:
        """Commit a write that changes nothing: raises as any write would now."""
        ...

    def close(self) -> None:
        """Let go of the store; idempotent."""
        ...
