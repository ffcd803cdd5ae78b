"""`JournalQueries`: the journal's reads, once for SQLite and PostgreSQL: jobs, a job's
partitions by the page and in summary, failed attempts, counts by state, what a restarted
service resumes, and the saved estimates. Each reads no more rows than its answer holds."""

from __future__ import annotations

from typing import Generic

from pacer.journal.checks import check_limit
from pacer.journal.dialect import C, Connection, Dialect
from pacer.journal.records import (
    ACTIVE,
    MAX_PAGE,
    Attempt,
    JobKey,
    JobRecord,
    JobState,
    PartitionRecord,
    PartitionSummary,
    UnknownJob,
    is_int,
)
from pacer.journal.rows import (
    ATTEMPT_COLUMNS,
    JOB_COLUMNS,
    PARTITION_COLUMNS,
    estimates_key_of,
    estimates_of,
    job_from_row,
    jobs_page_of,
    jobs_page_statement,
    page_from_rows,
)
from pacer.ranges import IndexRanges


def read_job(db: Connection, job_id: str, lock: str = "") -> JobRecord | None:
    """The job with this id, or None; ``lock`` (a `Dialect`'s) holds its row against other
    writers until the transaction ends."""
    row = db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?{lock}", (job_id,)).fetchone()
    return None if row is None else job_from_row(row)


def require_job(db: Connection, job_id: str, lock: str = "") -> JobRecord:
    """`read_job`, or ``UnknownJob`` if there is no such job."""
    job = read_job(db, job_id, lock)
    if job is None:
        raise UnknownJob(job_id)
    return job


class JournalQueries(Generic[C]):
    """The journal's reads, on the database ``sql`` speaks to, outside any write
    transaction."""

    def __init__(self, sql: Dialect[C]) -> None:
        self._sql = sql

    def now(self) -> float:
        """The dialect's clock: the wall-clock seconds jobs are stamped with now."""
        with self._sql.reading() as db:
            return self._sql.now(db)

    def get_job(self, job_id: str) -> JobRecord | None:
        """The job with this id, or None."""
        with self._sql.reading() as db:
            return read_job(db, job_id)

    def list_jobs(self, state: JobState | None = None, limit: int = 100) -> list[JobRecord]:
        """Up to ``limit`` jobs, newest first; only those in ``state`` if given."""
        return self.jobs_page(state, limit)[0]

    def jobs_page(
        self, state: JobState | None, limit: int, after: JobKey | None = None
    ) -> tuple[list[JobRecord], JobKey | None]:
        """Up to ``limit`` jobs, newest first (only those in ``state`` if given), from the one
        after ``after``: the key this method gave with the page before. Returns the page and
        the key of its last job, or None when no job follows it (`jobs_page_statement`)."""
        statement, args = jobs_page_statement(state, limit, after)
        with self._sql.reading() as db:
            return jobs_page_of(db.execute(statement, args).fetchall(), limit)

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, 0 if none)."""
        counts = dict.fromkeys(JobState, 0)
        with self._sql.reading() as db:
            for state, count in db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state"):
                counts[JobState(state)] = count
        return counts

    def failures(self, job_id: str, limit: int = 5) -> list[Attempt]:
        """The job's last ``limit`` failed attempts, newest first (any partition)."""
        check_limit("limit", limit)
        with self._sql.reading() as db:
            rows = db.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = ?"
                " ORDER BY at DESC, idx DESC, attempt DESC LIMIT ?",
                (job_id, limit),
            )
            return [Attempt(*row) for row in rows]

    def partitions(self, job_id: str) -> list[PartitionRecord]:
        """All the job's partitions in index order, pending ones included; ``UnknownJob`` if
        there is no such job. A list as long as the job: for small jobs and tests; the API
        pages with ``partition_page``."""
        with self._sql.reading() as db:
            job = require_job(db, job_id)
            return self._page(db, job, 0, job.partitions)

    def partition_page(self, job_id: str, offset: int, limit: int) -> list[PartitionRecord]:
        """The job's partitions ``offset`` to ``offset + limit - 1`` (fewer past its end), in
        index order, pending ones included; ``UnknownJob`` if there is no such job.

        Reads at most ``limit`` rows (``limit`` at most MAX_PAGE): the pending records of the
        page are made up for its index range only.
        """
        if not is_int(offset) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        if not is_int(limit) or not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")
        with self._sql.reading() as db:
            return self._page(db, require_job(db, job_id), offset, limit)

    def _page(self, db: C, job: JobRecord, offset: int, limit: int) -> list[PartitionRecord]:
        end = min(offset + limit, job.partitions)
        if end <= offset:
            return []
        rows = db.execute(
            f"SELECT {PARTITION_COLUMNS} FROM {self._sql.partition_rows} WHERE job_id = ?"
            " AND idx >= ?"
            " AND idx < ? ORDER BY idx LIMIT ?",
            (job.id, offset, end, end - offset),
        ).fetchall()
        attempts = db.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = ? AND idx >= ? AND idx < ?"
            " ORDER BY idx, attempt",
            (job.id, offset, end),
        )
        return page_from_rows(job, offset, end, rows, attempts)

    def partition_summary(self, job_id: str, failures: int = 5) -> PartitionSummary:
        """Counts of the job's partitions by state and its first ``failures`` failures, without
        reading its completed rows; ``UnknownJob`` if there is no such job."""
        # From the partial index of failures: the literal 'failed' (not a parameter) is what
        # lets the databases use it.
        failed_rows = (
            f"FROM partitions {self._sql.by_failures} WHERE job_id = ? AND state = 'failed'"
        )
        with self._sql.reading() as db:
            job = require_job(db, job_id)
            (failed,) = db.execute(f"SELECT COUNT(*) {failed_rows}", (job_id,)).fetchone()
            first = db.execute(
                f"SELECT idx, error {failed_rows} ORDER BY idx LIMIT ?", (job_id, failures)
            ).fetchall()
        return PartitionSummary(
            pending=job.partitions - job.partitions_done - failed,
            completed=job.partitions_done,
            failed=failed,
            first_failures=[(idx, error) for idx, error in first],
        )

    def incomplete(self) -> list[tuple[JobRecord, IndexRanges]]:
        """Queued and running jobs, higher priority then older first, each with its partitions
        not yet completed, as runs (a job of a million pending partitions is one run, not a
        million integers): what a restarted service dispatches again."""
        with self._sql.reading() as db:
            rows = db.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN (?, ?)"
                " ORDER BY priority DESC, created_at, seq",
                ACTIVE,
            ).fetchall()
            return [(job, self._pending(db, job)) for job in map(job_from_row, rows)]

    def _pending(self, db: C, job: JobRecord) -> IndexRanges:
        if job.partitions_done == 0:
            return IndexRanges.of(range(job.partitions))
        return self._sql.pending(db, job)

    def load_estimates(self) -> dict[str, float | None] | None:
        """The estimates last saved, or None if none were."""
        return estimates_of(self._saved_estimates())

    def load_estimates_key(self) -> str | None:
        """The key the estimates were saved with; None if none was (or nothing was saved)."""
        return estimates_key_of(self._saved_estimates())

    def load_workload_estimates(self) -> dict[str, dict[str, float | None]]:
        """Every workload key's saved estimates, by key (empty if none were saved)."""
        with self._sql.reading() as db:
            rows = db.execute(
                "SELECT workload_key, estimates FROM workload_estimates ORDER BY workload_key"
            ).fetchall()
        return {str(key): estimates_of(str(blob)) or {} for key, blob in rows}

    def _saved_estimates(self) -> str | None:
        column, value = self._sql.estimates_row
        with self._sql.reading() as db:
            row = db.execute(
                f"SELECT estimates FROM estimates WHERE {column} = ?", (value,)
            ).fetchone()
        return None if row is None else str(row[0])
