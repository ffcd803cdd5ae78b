"""The SQLite journal's reads: jobs, a job's partitions by the page and in summary, counts by
state, and what a restarted service resumes, as runs of indices."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from pacer.journal.checks import check_limit
from pacer.journal.connection import SqliteConnection, job_from_row
from pacer.journal.records import (
    ACTIVE,
    MAX_PAGE,
    Attempt,
    JobKey,
    JobRecord,
    JobState,
    PartitionRecord,
    PartitionState,
    PartitionSummary,
    is_int,
)
from pacer.journal.schema import ATTEMPT_COLUMNS, BY_FAILURES, JOB_COLUMNS, PARTITION_COLUMNS
from pacer.ranges import IndexRanges


def page_from_rows(
    job: JobRecord, offset: int, end: int, rows: Iterable[Sequence[Any]],
    attempts: Iterable[Sequence[Any]],
) -> list[PartitionRecord]:  # fmt: skip
    """The job's partitions ``offset`` to ``end - 1``, from the ``rows`` of PARTITION_COLUMNS
    that a journal holds for them and their ``attempts`` (rows of ATTEMPT_COLUMNS, by index
    then attempt): the partitions without a row are pending."""
    tried: dict[int, list[Attempt]] = {}
    for row in attempts:
        tried.setdefault(row[0], []).append(Attempt(*row))
    stored = {
        idx: PartitionRecord(job.id, idx, PartitionState(state), synthesis_s, gpu_s,
                             json.loads(phases), digest, error, gpu, completed_at,
                             tried.get(idx, []))
        for idx, state, synthesis_s, gpu_s, phases, digest, error, gpu, completed_at in rows
    }  # fmt: skip
    pending = PartitionState.PENDING
    return [
        stored.get(i) or PartitionRecord(job.id, i, pending, attempts=tried.get(i, []))
        for i in range(offset, end)
    ]


def jobs_page_statement(
    state: JobState | None, limit: int, after: JobKey | None, mark: str
) -> tuple[str, tuple[object, ...]]:
    """The query of a page of jobs (`JobReads.jobs_page`) and its arguments, ``mark`` the
    parameter marker (``?``, or ``%s`` for psycopg): JOB_COLUMNS and the row's ``seq``.

    Keyset, not offset: newest first by (created_at, seq), from the key after ``after``. Jobs
    accepted meanwhile sort before the first page, so they never shift a later one, and
    pruned ones leave no hole to skip across.
    """
    check_limit("limit", limit)
    where: list[str] = []
    args: list[object] = []
    if state is not None:
        where.append(f"state = {mark}")
        args.append(state)
    if after is not None:
        where.append(f"(created_at, seq) < ({mark}, {mark})")
        args += after
    condition = f"WHERE {' AND '.join(where)} " if where else ""
    statement = (f"SELECT {JOB_COLUMNS}, seq FROM jobs {condition}"
                 f"ORDER BY created_at DESC, seq DESC LIMIT {mark}")  # fmt: skip
    return statement, (*args, limit + 1)


def jobs_page_of(rows: list[Any], limit: int) -> tuple[list[JobRecord], JobKey | None]:
    """The page of jobs in ``rows`` (up to ``limit`` + 1 rows of `jobs_page_statement`) and
    the key of its last job, or None when no job follows it."""
    page = rows[:limit]
    last = (page[-1][7], page[-1][-1]) if len(rows) > limit else None  # created_at, seq
    return [job_from_row(tuple(row[:-1])) for row in page], last


class JobReads(SqliteConnection):
    """Reads jobs and their partitions; never more rows than the answer holds."""

    def list_jobs(self, state: JobState | None = None, limit: int = 100) -> list[JobRecord]:
        """Up to ``limit`` jobs, newest first; only those in ``state`` if given."""
        return self.jobs_page(state, limit)[0]

    def jobs_page(
        self, state: JobState | None, limit: int, after: JobKey | None = None
    ) -> tuple[list[JobRecord], JobKey | None]:
        """Up to ``limit`` jobs, newest first (only those in ``state`` if given), from the one
        after ``after``: the key this method gave with the page before. Returns the page and
        the key of its last job, or None when no job follows it (`jobs_page_statement`)."""
        statement, args = jobs_page_statement(state, limit, after, "?")
        return jobs_page_of(self._db.execute(statement, args).fetchall(), limit)

    def partitions(self, job_id: str) -> list[PartitionRecord]:
        """All the job's partitions in index order, pending ones included; ``UnknownJob`` if
        there is no such job. A list as long as the job: for small jobs and tests; the API
        pages with ``partition_page``.
        """
        job = self._require(job_id)
        return self._page(job, 0, job.partitions)

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
        return self._page(self._require(job_id), offset, limit)

    def _page(self, job: JobRecord, offset: int, limit: int) -> list[PartitionRecord]:
        end = min(offset + limit, job.partitions)
        if end <= offset:
            return []
        rows = self._db.execute(
            f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE job_id = ? AND idx >= ?"
            " AND idx < ? ORDER BY idx LIMIT ?",
            (job.id, offset, end, end - offset),
        )
        attempts = self._db.execute(
            f"SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE job_id = ? AND idx >= ? AND idx < ?"
            " ORDER BY idx, attempt",
            (job.id, offset, end),
        )
        return page_from_rows(job, offset, end, rows, attempts)

    def partition_summary(self, job_id: str, failures: int = 5) -> PartitionSummary:
        """Counts of the job's partitions by state and its first ``failures`` failures, without
        reading its completed rows; ``UnknownJob`` if there is no such job."""
        job = self._require(job_id)
        # The partial index of failures; on the primary key SQLite would read every row of
        # the job. The literal 'failed' (not a parameter) is what makes the index usable.
        failed = self._db.execute(
            f"SELECT COUNT(*) FROM partitions {BY_FAILURES} WHERE job_id = ? AND state = 'failed'",
            (job_id,),
        ).fetchone()[0]
        first = self._db.execute(
            f"SELECT idx, error FROM partitions {BY_FAILURES} WHERE job_id = ? AND state = 'failed'"
            " ORDER BY idx LIMIT ?",
            (job_id, failures),
        )
        return PartitionSummary(
            pending=job.partitions - job.partitions_done - failed,
            completed=job.partitions_done,
            failed=failed,
            first_failures=[(idx, error) for idx, error in first],
        )

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, 0 if none)."""
        counts = dict.fromkeys(JobState, 0)
        for state, count in self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state"):
            counts[JobState(state)] = count
        return counts

    def incomplete(self) -> list[tuple[JobRecord, IndexRanges]]:
        """Queued and running jobs, higher priority then older first, each with its partitions
        not yet completed, as runs (a job of a million pending partitions is one run, not a
        million integers): what a restarted service dispatches again.
        """
        rows = self._db.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE state IN (?, ?)"
            " ORDER BY priority DESC, created_at, seq",
            ACTIVE,
        )
        return [(job, self._pending(job)) for job in map(job_from_row, rows.fetchall())]

    def _pending(self, job: JobRecord) -> IndexRanges:
        if job.partitions_done == 0:
            return IndexRanges.of(range(job.partitions))
        # In primary-key order, streamed: the gaps between completed partitions are the runs.
        rows = self._db.execute(
            "SELECT idx FROM partitions WHERE job_id = ? AND state = ? ORDER BY idx",
            (job.id, PartitionState.COMPLETED),
        )
        return IndexRanges.excluding(job.partitions, (idx for (idx,) in rows))
