"""`JournalCore`: the journal's writes and their rules, once for SQLite and PostgreSQL.

A job is queued, then running once it has a result, then completed, failed or cancelled; a
finished job never changes again. A result is stored once: a partition that has a row keeps
it, so a job completes once. A failed attempt is counted per partition, and the job fails at
the last one allowed. Each write is one transaction on the `Dialect`; a bad argument raises
``ValueError`` or `UnknownJob` and writes nothing. The reads are `JournalQueries` (`queries`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Generic

from pacer.journal.checks import (
    check_index,
    check_limit,
    check_text,
    checked_params_json,
    exhausted,
    keyed_request,
)
from pacer.journal.dialect import C, Dialect
from pacer.journal.queries import read_job, require_job
from pacer.journal.records import (
    ACTIVE,
    TERMINAL,
    IdempotencyConflict,
    JobRecord,
    JobState,
    PartitionState,
    check_duration,
)
from pacer.journal.rows import JOB_COLUMNS, estimates_json, job_from_row

# Statements name at most this many values in one IN list (SQLite's oldest limit is 999).
IN_LIST = 500

# The pending partitions of queued or running jobs, each with its count of failed attempts and
# the reason of its last; arguments: the ACTIVE states, then the count it must reach.
_LAST_ATTEMPT = (
    "(SELECT x.{} FROM attempts x WHERE x.job_id = a.job_id AND x.idx = a.idx"
    " ORDER BY x.attempt DESC LIMIT 1)"
)
_EXHAUSTED = (
    f"SELECT a.job_id, a.idx, COUNT(*), {_LAST_ATTEMPT.format('reason')},"
    f" {_LAST_ATTEMPT.format('gpu')}"
    " FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.state IN (?, ?)"
    " AND NOT EXISTS (SELECT 1 FROM partitions p WHERE p.job_id = a.job_id AND p.idx = a.idx)"
    " GROUP BY a.job_id, a.idx HAVING COUNT(*) >= ? ORDER BY a.job_id, a.idx"
)


def in_lists(values: Sequence[str]) -> Iterator[tuple[str, Sequence[str]]]:
    """``values`` in slices of up to IN_LIST, each with its list of markers: ``(?, ?, ...)``."""
    for start in range(0, len(values), IN_LIST):
        part = values[start : start + IN_LIST]
        yield f"({', '.join('?' * len(part))})", part


class JournalCore(Generic[C]):
    """The journal's writes, on the database ``sql`` speaks to. `SqliteJournal` and `PgJournal`
    each hold one."""

    def __init__(self, sql: Dialect[C]) -> None:
        self._sql = sql

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(
        self, partitions: int, workload: str | None, params: dict[str, Any], priority: int = 0
    ) -> JobRecord:
        """Journal a queued job of ``partitions`` partitions; higher ``priority`` resumes first.
        ``params`` must be JSON-serializable; the record holds them as read back from JSON."""
        params_json = checked_params_json(partitions, workload, params, priority)
        with self._sql.writing() as db:
            job = self._insert_job(db, partitions, workload, params_json, priority, None, None)
        assert job is not None  # no key, no conflict
        return job

    def add_job_once(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> tuple[JobRecord, bool]:  # fmt: skip
        """``add_job`` under an idempotency key: the job, and whether it is new.

        The first call with ``key`` journals the job; a later one with the same request returns
        that job (False); one with a different request raises ``IdempotencyConflict`` and writes
        nothing. Callers that take the same key at once make one job: the others wait for it
        and return it. The key is remembered as long as its job is (until ``prune``).
        """
        params_json, digest = keyed_request(key, partitions, workload, params, priority)
        with self._sql.writing() as db:
            job = self._insert_job(db, partitions, workload, params_json, priority, key, digest)
            if job is not None:
                return job, True
            found = self._job_for_key(db, key, digest)
        if found is None:  # the key's job was pruned between the two statements
            return self.add_job_once(key, partitions, workload, params, priority)
        return found, False

    def job_for_key(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> JobRecord | None:  # fmt: skip
        """The job ``key`` names if it was added with this request; None if the key is new;
        ``IdempotencyConflict`` if it was added with another request. Writes nothing."""
        _, digest = keyed_request(key, partitions, workload, params, priority)
        with self._sql.reading() as db:
            return self._job_for_key(db, key, digest)

    def _job_for_key(self, db: C, key: str, digest: str) -> JobRecord | None:
        row = db.execute(
            f"SELECT {JOB_COLUMNS}, request_digest FROM jobs WHERE idempotency_key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        if row[-1] != digest:
            raise IdempotencyConflict(key, row[0])
        return job_from_row(row[:-1])

    def _insert_job(
        self, db: C, partitions: int, workload: str | None, params_json: str, priority: int,
        key: str | None, digest: str | None,
    ) -> JobRecord | None:  # fmt: skip
        """Insert a queued job, in the open transaction; None if ``key`` names a job already."""
        now = self._sql.now(db)
        job = JobRecord(
            uuid.uuid4().hex[:16], JobState.QUEUED, partitions, 0, workload,
            json.loads(params_json), priority, now, now, None, None,
        )  # fmt: skip
        inserted = db.execute(
            f"INSERT INTO jobs ({JOB_COLUMNS}, idempotency_key, request_digest)"
            " VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)"
            " ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING",
            (job.id, job.state, partitions, workload, params_json, priority, now, now, key,
             digest),
        ).rowcount  # fmt: skip
        if inserted == 0:
            return None
        self._sql.job_added(db, job)
        return job

    def mark_running(self, job_id: str) -> JobRecord:
        """A queued job's first partitions were dispatched: it is running. Others are unchanged.
        ``UnknownJob`` if there is no such job."""
        with self._sql.writing() as db:
            job = require_job(db, job_id, self._sql.lock)
            return self._transition(db, job, JobState.RUNNING)

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued or running job; a finished one is returned as is; None if unknown."""
        with self._sql.writing() as db:
            job = read_job(db, job_id, self._sql.lock)
            return None if job is None else self._transition(db, job, JobState.CANCELLED)

    def _transition(
        self, db: C, job: JobRecord, to: JobState, error: str | None = None
    ) -> JobRecord:
        """Move a queued or running job to ``to``, in the open transaction (its row read with
        the dialect's lock); others are as is."""
        if job.state not in ACTIVE or job.state == to:
            return job
        now = self._sql.now(db)
        db.execute(
            "UPDATE jobs SET state = ?, error = ?, updated_at = ? WHERE id = ?",
            (to, error, now, job.id),
        )
        if to in TERMINAL:
            self._sql.job_ended(db, job.id)
        return replace(job, state=to, error=error, updated_at=now)

    # -- failures -----------------------------------------------------------------------------
    def fail_partition(self, job_id: str, index: int, error: str) -> JobRecord:
        """A partition failed: so does its queued or running job, with ``error``. Partitions
        not completed stay pending. A finished job is returned as is."""
        check_text("error", error)
        with self._sql.writing() as db:
            job = require_job(db, job_id, self._sql.lock)
            check_index(job, index)
            return self._fail(db, job, index, error) if job.state in ACTIVE else job

    def record_attempt(
        self, job_id: str, index: int, reason: str, gpu: int | None, max_attempts: int
    ) -> tuple[int, JobRecord]:
        """Journal a failed attempt of a partition of a queued or running job; the attempt's
        number (from 1) and the job, failed once that is ``max_attempts``.

        The failed job's ``error`` names the partition, its attempts and the last reason; its
        other partitions not completed stay pending. Nothing is written for a finished job or
        partition (number 0). ``UnknownJob`` or ``ValueError`` (index, reason) write nothing.
        """
        check_text("reason", reason)
        check_limit("max_attempts", max_attempts)
        with self._sql.writing() as db:
            job = require_job(db, job_id, self._sql.lock)
            check_index(job, index)
            finished = db.execute(
                "SELECT 1 FROM partitions WHERE job_id = ? AND idx = ?", (job_id, index)
            ).fetchone()
            if job.state not in ACTIVE or finished is not None:
                return 0, job
            (done,) = db.execute(
                "SELECT COUNT(*) FROM attempts WHERE job_id = ? AND idx = ?", (job_id, index)
            ).fetchone()
            attempt = int(done) + 1
            db.execute(
                "INSERT INTO attempts (job_id, idx, attempt, reason, gpu, at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, index, attempt, reason, gpu, self._sql.now(db)),
            )
            if attempt < max_attempts:
                return attempt, job
            error = exhausted(index, attempt, reason)
            return attempt, self._fail(db, job, index, error, gpu)

    def _fail(
        self, db: C, job: JobRecord, index: int, error: str, gpu: int | None = None
    ) -> JobRecord:
        """In the open transaction: partition ``index`` failed (on ``gpu``, where its last
        attempt reached one), and so does its active job."""
        db.execute(
            "INSERT INTO partitions (job_id, idx, state, phases, error, gpu, completed_at)"
            " VALUES (?, ?, ?, '{}', ?, ?, ?) ON CONFLICT (job_id, idx) DO NOTHING",
            (job.id, index, PartitionState.FAILED, error, gpu, self._sql.now(db)),
        )
        return self._transition(db, job, JobState.FAILED, error)

    def fail_exhausted(self, max_attempts: int) -> list[JobRecord]:
        """Fail every queued or running job with a pending partition that has had
        ``max_attempts`` failed attempts or more (the limit may have been lowered since, or
        the service stopped between an attempt and its job's failure); the jobs failed."""
        check_limit("max_attempts", max_attempts)
        failed: list[JobRecord] = []
        with self._sql.writing() as db:
            rows = db.execute(_EXHAUSTED, (*ACTIVE, max_attempts)).fetchall()
            for job_id, index, count, reason, gpu in rows:
                job = require_job(db, job_id, self._sql.lock)
                if job.state in ACTIVE:  # else failed by an earlier partition of this round
                    error = exhausted(index, count, reason)
                    failed.append(self._fail(db, job, index, error, gpu))
        return failed

    # -- estimates and retention --------------------------------------------------------------
    def save_estimates(self, values: Mapping[str, float | None], key: str | None = None) -> None:
        """Store the controller's estimates (seconds, or None if unknown), replacing those
        saved before, with ``key``: what they are valid for
        (``pacer.control.estimates.estimates_key``)."""
        blob = estimates_json(values, key)
        column, value = self._sql.estimates_row
        with self._sql.writing() as db:
            db.execute(
                f"INSERT INTO estimates ({column}, estimates) VALUES (?, ?)"
                f" ON CONFLICT ({column}) DO UPDATE SET estimates = excluded.estimates",
                (value, blob),
            )

    def save_workload_estimates(self, key: str, values: Mapping[str, float | None]) -> None:
        """Store an engine workload's estimates (seconds, or None if unknown) under ``key``,
        replacing those saved under it before. ValueError for an empty key or a value that is
        not a duration."""
        if not isinstance(key, str) or not key:
            raise ValueError(f"workload_key must be a non-empty string, got {key!r}")
        blob = estimates_json(values, None)
        with self._sql.writing() as db:
            db.execute(
                "INSERT INTO workload_estimates (workload_key, estimates) VALUES (?, ?)"
                " ON CONFLICT (workload_key) DO UPDATE SET estimates = excluded.estimates",
                (key, blob),
            )

    def prune(self, retention_s: float, now: float | None = None) -> int:
        """Delete finished jobs last updated more than ``retention_s`` seconds before the
        journal's clock now, or before ``now`` where that is earlier, and every row of theirs;
        how many jobs were deleted."""
        check_duration("retention_s", retention_s)
        deleted = 0
        with self._sql.writing() as db:
            own = self._sql.now(db)
            cutoff = (own if now is None else min(own, now)) - retention_s
            ids = [job_id for (job_id,) in db.execute(
                "SELECT id FROM jobs WHERE state IN (?, ?, ?) AND updated_at < ? ORDER BY id",
                (*TERMINAL, cutoff),
            ).fetchall()]  # fmt: skip
            for markers, part in in_lists(ids):
                for table in self._sql.job_tables:
                    db.execute(f"DELETE FROM {table} WHERE job_id IN {markers}", part)
                deleted += db.execute(f"DELETE FROM jobs WHERE id IN {markers}", part).rowcount
        return deleted

    def withdraw(self, job_id: str) -> bool:
        """Delete job ``job_id`` and every row of its: a job whose acceptance was never
        answered (its write returned too late); whether it was there."""
        with self._sql.writing() as db:
            for table in self._sql.job_tables:
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
            return bool(db.execute("DELETE FROM jobs WHERE id = ?", (job_id,)).rowcount)
