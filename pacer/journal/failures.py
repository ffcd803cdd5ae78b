"""The SQLite journal's failures: each failed attempt of a partition (so retries count across
restarts), a partition that failed and its job with it, and the jobs whose partitions have had
their last attempt."""

from __future__ import annotations

from pacer.journal.checks import check_index, check_limit, check_text, exhausted
from pacer.journal.connection import SqliteConnection
from pacer.journal.records import ACTIVE, Attempt, JobRecord, JobState, PartitionState
from pacer.journal.schema import ATTEMPT_COLUMNS


def exhausted_statement(mark: str, last: str) -> str:
    """The query of the pending partitions of queued or running jobs that have had a number of
    failed attempts or more (`FailureRecords.fail_exhausted`), ``mark`` the parameter marker
    (``?``, or ``%s`` for psycopg): the job, the index, the count, and ``last``, what the
    backend selects of the last attempt. Its arguments: the ACTIVE states, then the number."""
    return (f"SELECT a.job_id, a.idx, COUNT(*), {last} FROM attempts a"
            f" JOIN jobs j ON j.id = a.job_id WHERE j.state IN ({mark}, {mark})"
            " AND NOT EXISTS (SELECT 1 FROM partitions p WHERE p.job_id = a.job_id"
            f" AND p.idx = a.idx) GROUP BY a.job_id, a.idx HAVING COUNT(*) >= {mark}"
            " ORDER BY a.job_id, a.idx")  # fmt: skip


class FailureRecords(SqliteConnection):
    """Journals failed attempts and failed partitions, and reads a job's last failures."""

    def fail_partition(self, job_id: str, index: int, error: str) -> JobRecord:
        """A partition failed: so does its queued or running job, with ``error``.

        Partitions not completed stay pending. A finished job is returned as is.
        """
        check_text("error", error)
        with self._transaction():
            job = self._require(job_id)
            check_index(job, index)
            return self._fail(job, index, error) if job.state in ACTIVE else job

    def record_attempt(
        self, job_id: str, index: int, reason: str, gpu: int | None, max_attempts: int
    ) -> tuple[int, JobRecord]:
        """Journal a failed attempt of a partition of a queued or running job; the attempt's
        number (from 1) and the job, failed once that is ``max_attempts``.

        The failed job's ``error`` names the partition, its attempts and the last reason; its
        other partitions not completed stay pending. Nothing is written for a finished job
        (number 0). ``UnknownJob`` or ``ValueError`` (index, reason) write nothing.
        """
        check_text("reason", reason)
        check_limit("max_attempts", max_attempts)
        with self._transaction() as db:
            job = self._require(job_id)
            check_index(job, index)
            finished = db.execute(
                "SELECT 1 FROM partitions WHERE job_id = ? AND idx = ?", (job_id, index)
            ).fetchone()
            if job.state not in ACTIVE or finished is not None:
                return 0, job
            (done,) = db.execute(
                "SELECT COUNT(*) FROM attempts WHERE job_id = ? AND idx = ?", (job_id, index)
            ).fetchone()
            attempt = done + 1
            now = self._clock()
            db.execute(
                f"INSERT INTO attempts (job_id, {ATTEMPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, index, attempt, reason, gpu, now),
            )
            if attempt < max_attempts:
                return attempt, job
            return attempt, self._fail(job, index, exhausted(index, attempt, reason))

    def _fail(self, job: JobRecord, index: int, error: str) -> JobRecord:
        """In the open transaction: partition ``index`` failed, and so does its active job."""
        self._db.execute(
            "INSERT OR IGNORE INTO partitions (job_id, idx, state, phases, error, completed_at)"
            " VALUES (?, ?, ?, '{}', ?, ?)",
            (job.id, index, PartitionState.FAILED, error, self._clock()),
        )
        return self._transition(job, JobState.FAILED, error)

    def fail_exhausted(self, max_attempts: int) -> list[JobRecord]:
        """Fail every queued or running job with a pending partition that has had
        ``max_attempts`` failed attempts or more (the limit may have been lowered since, or
        the service stopped between an attempt and its job's failure); the jobs failed."""
        check_limit("max_attempts", max_attempts)
        failed: list[JobRecord] = []
        with self._transaction() as db:
            rows = db.execute(
                exhausted_statement("?", "MAX(a.attempt)"), (*ACTIVE, max_attempts)
            ).fetchall()
            for job_id, index, count, last in rows:
                job = self._require(job_id)
                if job.state not in ACTIVE:
                    continue  # failed by an earlier partition of this round
                (reason,) = db.execute(
                    "SELECT reason FROM attempts WHERE job_id = ? AND idx = ? AND attempt = ?",
                    (job_id, index, last),
                ).fetchone()
                failed.append(self._fail(job, index, exhausted(index, count, reason)))
        return failed

    def failures(self, job_id: str, limit: int = 5) -> list[Attempt]:
        """The job's last ``limit`` failed attempts, newest first (any partition)."""
        check_limit("limit", limit)
        rows = self._db.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = ?"
            " ORDER BY at DESC, idx DESC, attempt DESC LIMIT ?",
            (job_id, limit),
        )
        return [Attempt(*row) for row in rows]
