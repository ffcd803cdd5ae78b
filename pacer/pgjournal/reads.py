"""The PostgreSQL journal's reads: jobs, pages and summaries of partitions, failed attempts,
what is incomplete, and this host's saved estimates. Each is one statement or a few, outside
any transaction, with the semantics of the SQLite journal's."""

from __future__ import annotations

from collections.abc import Iterable

from pacer.journal.checks import check_limit
from pacer.journal.reads import jobs_page_of, jobs_page_statement, page_from_rows
from pacer.journal.records import (
    MAX_PAGE,
    Attempt,
    JobKey,
    JobRecord,
    JobState,
    PartitionRecord,
    PartitionSummary,
    is_int,
)
from pacer.journal.saved_estimates import estimates_key_of, estimates_of
from pacer.journal.schema import ATTEMPT_COLUMNS, PARTITION_COLUMNS
from pacer.pgjournal.database import ACTIVE, JOB_COLUMNS, Connection, Database, job_record
from pacer.ranges import IndexRanges


def free_runs(start: int, stop: int, taken: Iterable[tuple[int, int]]) -> IndexRanges:
    """The indices of ``[start, stop)`` outside the ascending, disjoint runs ``taken``.

    >>> free_runs(0, 10, [(0, 1), (3, 5)]).runs()
    [(1, 3), (5, 10)]
    """
    gaps: list[tuple[int, int]] = []
    at = start
    for first, end in taken:
        if first > at:
            gaps.append((at, min(first, stop)))
        at = max(at, end)
        if at >= stop:
            break
    if at < stop:
        gaps.append((at, stop))
    return IndexRanges(gaps)


class JournalReads(Database):
    """Reads of the PostgreSQL journal, each with the SQLite journal's contract."""

    def get_job(self, job_id: str) -> JobRecord | None:
        """The job with this id, or None."""
        with self._connection() as conn:
            return self._read_job(conn, job_id)

    def list_jobs(self, state: JobState | None = None, limit: int = 100) -> list[JobRecord]:
        """Up to ``limit`` jobs, newest first; only those in ``state`` if given."""
        check_limit("limit", limit)
        newest = "ORDER BY created_at DESC, seq DESC LIMIT %s"
        with self._connection() as conn:
            if state is None:
                rows = conn.execute(f"SELECT {JOB_COLUMNS} FROM jobs {newest}", (limit,))
            else:
                rows = conn.execute(
                    f"SELECT {JOB_COLUMNS} FROM jobs WHERE state = %s {newest}", (state, limit)
                )
            return [job_record(row) for row in rows]

    def jobs_page(
        self, state: JobState | None, limit: int, after: JobKey | None = None
    ) -> tuple[list[JobRecord], JobKey | None]:
        """A page of ``list_jobs`` from the job after ``after`` (the key the page before gave),
        with the key of its last job, or None after the last page (`jobs_page_statement`)."""
        statement, args = jobs_page_statement(state, limit, after, "%s")
        with self._connection() as conn:
            return jobs_page_of(conn.execute(statement, args).fetchall(), limit)

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, 0 if none)."""
        counts = dict.fromkeys(JobState, 0)
        with self._connection() as conn:
            for state, count in conn.execute("SELECT state, count(*) FROM jobs GROUP BY state"):
                counts[JobState(state)] = count
        return counts

    def failures(self, job_id: str, limit: int = 5) -> list[Attempt]:
        """The job's last ``limit`` failed attempts, newest first (any partition)."""
        check_limit("limit", limit)
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = %s"
                " ORDER BY at DESC, idx DESC, attempt DESC LIMIT %s",
                (job_id, limit),
            )
            return [Attempt(*row) for row in rows]

    def partitions(self, job_id: str) -> list[PartitionRecord]:
        """All the job's partitions in index order, pending ones included (for small jobs and
        tests); ``UnknownJob`` if there is no such job."""
        with self._connection() as conn:
            job = self._require(conn, job_id)
            return _page(conn, job, 0, job.partitions)

    def partition_page(self, job_id: str, offset: int, limit: int) -> list[PartitionRecord]:
        """The job's partitions ``offset`` to ``offset + limit - 1`` (fewer past its end), in
        index order, pending ones included, from at most ``limit`` rows (``limit`` at most
        MAX_PAGE); ``UnknownJob`` if there is no such job."""
        if not is_int(offset) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        if not is_int(limit) or not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")
        with self._connection() as conn:
            return _page(conn, self._require(conn, job_id), offset, limit)

    def partition_summary(self, job_id: str, failures: int = 5) -> PartitionSummary:
        """Counts of the job's partitions by state and its first ``failures`` failures, from
        the partial index of failures, without reading its completed rows."""
        with self._connection() as conn:
            job = self._require(conn, job_id)
            row = conn.execute(
                "SELECT count(*) FROM partitions WHERE job_id = %s AND state = 'failed'",
                (job_id,),
            ).fetchone()
            failed = 0 if row is None else int(row[0])
            first = conn.execute(
                "SELECT idx, error FROM partitions WHERE job_id = %s AND state = 'failed'"
                " ORDER BY idx LIMIT %s",
                (job_id, failures),
            ).fetchall()
        return PartitionSummary(
            pending=job.partitions - job.partitions_done - failed,
            completed=job.partitions_done,
            failed=failed,
            first_failures=[(idx, error) for idx, error in first],
        )

    def incomplete(self) -> list[tuple[JobRecord, IndexRanges]]:
        """Queued and running jobs, higher priority then older first, each with its partitions
        not yet completed as runs, computed by the database from its completed ones' runs."""
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN (%s, %s)"
                " ORDER BY priority DESC, created_at, seq",
                ACTIVE,
            ).fetchall()
            return [(job, _pending(conn, job)) for job in map(job_record, rows)]

    def load_estimates(self) -> dict[str, float | None] | None:
        """The estimates this host last saved, or None if it saved none."""
        return estimates_of(self._saved_estimates())

    def load_estimates_key(self) -> str | None:
        """The key this host's estimates were saved with; None if none was (or none saved)."""
        return estimates_key_of(self._saved_estimates())

    def _saved_estimates(self) -> str | None:
        with self._connection() as conn:
            row = conn.execute(
                "SELECT estimates FROM estimates WHERE host = %s", (self.host,)
            ).fetchone()
        return None if row is None else str(row[0])


def _pending(conn: Connection, job: JobRecord) -> IndexRanges:
    if job.partitions_done == 0:
        return IndexRanges.of(range(job.partitions))
    # The runs of completed partitions (an index less its rank is constant along a run): as
    # many rows as runs, not as completed partitions.
    runs = conn.execute(
        "SELECT min(idx), max(idx) + 1 FROM (SELECT idx, idx - row_number() OVER (ORDER BY idx)"
        " AS run FROM partitions WHERE job_id = %s AND state = 'completed') AS done"
        " GROUP BY run ORDER BY 1",
        (job.id,),
    )
    return free_runs(0, job.partitions, runs)


def _page(conn: Connection, job: JobRecord, offset: int, limit: int) -> list[PartitionRecord]:
    end = min(offset + limit, job.partitions)
    if end <= offset:
        return []
    rows = conn.execute(
        f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE job_id = %s AND idx >= %s"
        " AND idx < %s ORDER BY idx LIMIT %s",
        (job.id, offset, end, end - offset),
    ).fetchall()
    attempts = conn.execute(
        f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = %s AND idx >= %s AND idx < %s"
        " ORDER BY idx, attempt",
        (job.id, offset, end),
    )
    return page_from_rows(job, offset, end, rows, attempts)
