"""The SQLite journal's writes of jobs: new jobs (under an idempotency key or not), their
states, proved partitions committed in batches, and the pruning of finished jobs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from pacer.journal.checks import check_index, checked_params_json, keyed_request
from pacer.journal.connection import SqliteConnection
from pacer.journal.records import (
    ACTIVE,
    TERMINAL,
    IdempotencyConflict,
    JobRecord,
    JobState,
    PartitionResult,
    PartitionState,
    check_duration,
    result_digest,
)
from pacer.journal.schema import JOB_COLUMNS, PARTITION_COLUMNS


class JobWriter(SqliteConnection):
    """Adds jobs, moves them between states and journals their proved partitions."""

    def add_job(
        self, partitions: int, workload: str | None, params: dict[str, Any], priority: int = 0
    ) -> JobRecord:
        """Journal a queued job of ``partitions`` partitions; higher ``priority`` resumes first.

        ``params`` must be JSON-serializable; the record holds them as read back from JSON.
        """
        params_json = checked_params_json(partitions, workload, params, priority)
        with self._transaction():
            return self._insert_job(partitions, workload, params_json, priority, None, None)

    def add_job_once(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> tuple[JobRecord, bool]:  # fmt: skip
        """``add_job`` under an idempotency key: the job, and whether it is new.

        The first call with ``key`` journals the job; a later one with the same request returns
        that job (False); one with a different request raises ``IdempotencyConflict`` and writes
        nothing. The key is remembered as long as its job is (until ``prune``).
        """
        params_json, digest = keyed_request(key, partitions, workload, params, priority)
        with self._transaction():
            job = self._job_for_key(key, digest)
            if job is not None:
                return job, False
            return self._insert_job(partitions, workload, params_json, priority, key, digest), True

    def job_for_key(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> JobRecord | None:  # fmt: skip
        """The job ``key`` names if it was added with this request; None if the key is new;
        ``IdempotencyConflict`` if it was added with another request. Writes nothing."""
        _, digest = keyed_request(key, partitions, workload, params, priority)
        return self._job_for_key(key, digest)

    def _job_for_key(self, key: str, digest: str) -> JobRecord | None:
        row = self._db.execute(
            "SELECT id, request_digest FROM jobs WHERE idempotency_key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        if row[1] != digest:
            raise IdempotencyConflict(key, row[0])
        return self._require(row[0])

    def _insert_job(
        self, partitions: int, workload: str | None, params_json: str, priority: int,
        key: str | None, digest: str | None,
    ) -> JobRecord:  # fmt: skip
        """Insert a queued job, in the open transaction."""
        now = self._clock()
        job = JobRecord(
            uuid.uuid4().hex[:16], JobState.QUEUED, partitions, 0, workload,
            json.loads(params_json), priority, now, now, None, None,
        )  # fmt: skip
        self._db.execute(
            f"INSERT INTO jobs ({JOB_COLUMNS}, idempotency_key, request_digest)"
            " VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)",
            (job.id, job.state, partitions, workload, params_json, priority, now, now, key,
             digest),
        )  # fmt: skip
        return job

    def mark_running(self, job_id: str) -> JobRecord:
        """A queued job's first partitions were dispatched: it is running. Others are unchanged."""
        with self._transaction():
            return self._transition(self._require(job_id), JobState.RUNNING)

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued or running job; a finished one is returned as is; None if unknown."""
        with self._transaction():
            job = self.get_job(job_id)
            return None if job is None else self._transition(job, JobState.CANCELLED)

    def complete_partitions(self, items: Iterable[PartitionResult]) -> list[JobRecord]:
        """Journal proved partitions in one transaction; return the jobs this completed.

        A partition already completed, or of a job no longer queued or running, is skipped, so
        a job completes once. A job with a new result becomes running. If any item names an
        unknown job (``UnknownJob``) or an index out of range (``ValueError``), nothing is written.
        """
        by_job: dict[str, list[PartitionResult]] = {}
        for item in items:
            by_job.setdefault(item.job_id, []).append(item)
        now = self._clock()
        completed: list[JobRecord] = []
        with self._transaction() as db:
            for job_id, results in by_job.items():
                job = self._require(job_id)
                check_index(job, max(r.index for r in results))
                if job.state not in ACTIVE:
                    continue
                rows = [
                    (r.index, PartitionState.COMPLETED, r.synthesis_s, r.gpu_s,
                     json.dumps(r.phases), r.digest, r.gpu, now, job_id)
                    for r in results
                ]  # fmt: skip
                added = db.executemany(
                    f"INSERT OR IGNORE INTO partitions ({PARTITION_COLUMNS}, job_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)",
                    rows,
                ).rowcount
                if added == 0:
                    continue
                job = replace(job, partitions_done=job.partitions_done + added, updated_at=now)
                if job.partitions_done < job.partitions:
                    job = replace(job, state=JobState.RUNNING)
                else:
                    digests = db.execute(
                        "SELECT digest FROM partitions WHERE job_id = ? ORDER BY idx", (job_id,)
                    )
                    digest = result_digest(d for (d,) in digests)
                    job = replace(job, state=JobState.COMPLETED, result_digest=digest)
                    completed.append(job)
                db.execute(
                    "UPDATE jobs SET state = ?, partitions_done = ?, updated_at = ?,"
                    " result_digest = ? WHERE id = ?",
                    (job.state, job.partitions_done, now, job.result_digest, job_id),
                )
        return completed

    def prune(self, retention_s: float) -> int:
        """Delete finished jobs, and their partitions, last updated more than ``retention_s``
        seconds ago. Returns how many jobs were deleted.
        """
        check_duration("retention_s", retention_s)
        cutoff = self._clock() - retention_s
        finished = "SELECT id FROM jobs WHERE state IN (?, ?, ?) AND updated_at < ?"
        with self._transaction() as db:
            db.execute(f"DELETE FROM partitions WHERE job_id IN ({finished})", (*TERMINAL, cutoff))
            db.execute(f"DELETE FROM attempts WHERE job_id IN ({finished})", (*TERMINAL, cutoff))
            deleted = db.execute(f"DELETE FROM jobs WHERE id IN ({finished})", (*TERMINAL, cutoff))
            return deleted.rowcount
