"""A journal whose rules and queries are the shared core's: `CoreJournal`, what `SqliteJournal`
and `pgjournal.PgJournal` have in common. Each backend gives it the dialect it speaks; every
method here is the `JournalBackend` contract, answered by `JournalCore` (writes) or
`JournalQueries` (reads). Each backend stores results its own way (``complete_partitions``):
SQLite step by step, PostgreSQL in one round trip on the server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pacer.journal.core import JournalCore
from pacer.journal.dialect import Dialect
from pacer.journal.queries import JournalQueries
from pacer.journal.records import (
    Attempt,
    JobKey,
    JobRecord,
    JobState,
    PartitionRecord,
    PartitionSummary,
)
from pacer.ranges import IndexRanges

__all__ = ["CoreJournal"]


class CoreJournal:
    """The `JournalBackend` methods, on the core over ``dialect``."""

    def __init__(self, dialect: Dialect[Any]) -> None:
        self._core = JournalCore(dialect)
        self._queries = JournalQueries(dialect)

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(
        self, partitions: int, workload: str | None, params: dict[str, Any], priority: int = 0
    ) -> JobRecord:
        """Journal a queued job of ``partitions`` partitions; higher ``priority`` resumes first."""
        return self._core.add_job(partitions, workload, params, priority)

    def add_job_once(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> tuple[JobRecord, bool]:  # fmt: skip
        """``add_job`` under an idempotency key: the job, and whether it is new."""
        return self._core.add_job_once(key, partitions, workload, params, priority)

    def job_for_key(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> JobRecord | None:  # fmt: skip
        """The job ``key`` names if it was added with this request, None if the key is new."""
        return self._core.job_for_key(key, partitions, workload, params, priority)

    def mark_running(self, job_id: str) -> JobRecord:
        """A queued job's first partitions were dispatched: it is running."""
        return self._core.mark_running(job_id)

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued or running job; a finished one as is; None if unknown."""
        return self._core.cancel(job_id)

    def get_job(self, job_id: str) -> JobRecord | None:
        """The job with this id, or None."""
        return self._queries.get_job(job_id)

    def list_jobs(self, state: JobState | None = None, limit: int = 100) -> list[JobRecord]:
        """Up to ``limit`` jobs, newest first; only those in ``state`` if given."""
        return self._queries.list_jobs(state, limit)

    def jobs_page(
        self, state: JobState | None, limit: int, after: JobKey | None = None
    ) -> tuple[list[JobRecord], JobKey | None]:
        """A page of ``list_jobs`` from the job after ``after``, and the key of its last job."""
        return self._queries.jobs_page(state, limit, after)

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present)."""
        return self._queries.counts()

    def incomplete(self) -> list[tuple[JobRecord, IndexRanges]]:
        """Queued and running jobs, each with its partitions not yet completed."""
        return self._queries.incomplete()

    def prune(self, retention_s: float, now: float | None = None) -> int:
        """Delete finished jobs last updated over ``retention_s`` before the journal's now, or
        ``now`` where earlier; how many."""
        return self._core.prune(retention_s, now)

    def withdraw(self, job_id: str) -> bool:
        """Delete a job whose acceptance was never answered, with its rows; whether it was."""
        return self._core.withdraw(job_id)

    def now(self) -> float:
        """The journal's clock: the wall-clock seconds it stamps jobs with now."""
        return self._queries.now()

    # -- partitions ---------------------------------------------------------------------------
    def fail_partition(self, job_id: str, index: int, error: str) -> JobRecord:
        """A partition failed: so does its queued or running job, with ``error``."""
        return self._core.fail_partition(job_id, index, error)

    def record_attempt(
        self, job_id: str, index: int, reason: str, gpu: int | None, max_attempts: int
    ) -> tuple[int, JobRecord]:
        """Journal a failed attempt; its number (0: the job is finished) and the job."""
        return self._core.record_attempt(job_id, index, reason, gpu, max_attempts)

    def fail_exhausted(self, max_attempts: int) -> list[JobRecord]:
        """Fail the active jobs with a partition that has had ``max_attempts`` attempts."""
        return self._core.fail_exhausted(max_attempts)

    def failures(self, job_id: str, limit: int = 5) -> list[Attempt]:
        """The job's last ``limit`` failed attempts, newest first."""
        return self._queries.failures(job_id, limit)

    def partitions(self, job_id: str) -> list[PartitionRecord]:
        """All the job's partitions in index order, pending ones included."""
        return self._queries.partitions(job_id)

    def partition_page(self, job_id: str, offset: int, limit: int) -> list[PartitionRecord]:
        """The job's partitions ``offset`` to ``offset + limit - 1``, pending ones included."""
        return self._queries.partition_page(job_id, offset, limit)

    def partition_summary(self, job_id: str, failures: int = 5) -> PartitionSummary:
        """Counts of the job's partitions by state and its first ``failures`` failures."""
        return self._queries.partition_summary(job_id, failures)

    # -- estimates ----------------------------------------------------------------------------
    def save_estimates(self, values: Mapping[str, float | None], key: str | None = None) -> None:
        """Store the controller's estimates (s, None if unknown), replacing those saved."""
        self._core.save_estimates(values, key)

    def load_estimates(self) -> dict[str, float | None] | None:
        """The estimates last saved, or None."""
        return self._queries.load_estimates()

    def load_estimates_key(self) -> str | None:
        """What the saved estimates are valid for, or None."""
        return self._queries.load_estimates_key()

    def save_workload_estimates(self, key: str, values: Mapping[str, float | None]) -> None:
        """Store a workload's estimates (s, None if unknown) under ``key``."""
        self._core.save_workload_estimates(key, values)

    def load_workload_estimates(self) -> dict[str, dict[str, float | None]]:
        """Every workload key's saved estimates, by key."""
        return self._queries.load_workload_estimates()
