"""What the parts of the SQLite journal share: the connection, the clock, one write
transaction, a job by id, and a job's move to another state."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from pacer.journal.records import ACTIVE, JobRecord, JobState, UnknownJob
from pacer.journal.schema import JOB_COLUMNS, transaction


def job_from_row(row: tuple[Any, ...]) -> JobRecord:
    """A job from a row of JOB_COLUMNS."""
    id_, state, partitions, done, workload, params, priority, created, updated, error, digest = row
    return JobRecord(
        id_, JobState(state), partitions, done, workload, json.loads(params), priority,
        created, updated, error, digest,
    )  # fmt: skip


class SqliteConnection:
    """The SQLite journal's connection ``_db`` and wall clock ``_clock`` (seconds), which its
    reads and writes share. Every write opens its transaction with ``_transaction``."""

    def __init__(self, db: sqlite3.Connection, clock: Callable[[], float]) -> None:
        self._db = db
        self._clock = clock

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with transaction(self._db) as db:
            yield db

    def get_job(self, job_id: str) -> JobRecord | None:
        """The job with this id, or None."""
        rows = self._db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        row = rows.fetchone()
        return None if row is None else job_from_row(row)

    def _require(self, job_id: str) -> JobRecord:
        job = self.get_job(job_id)
        if job is None:
            raise UnknownJob(job_id)
        return job

    def _transition(self, job: JobRecord, to: JobState, error: str | None = None) -> JobRecord:
        """Move a queued or running job to ``to``, in the open transaction; others are as is."""
        if job.state not in ACTIVE or job.state == to:
            return job
        now = self._clock()
        self._db.execute(
            "UPDATE jobs SET state = ?, error = ?, updated_at = ? WHERE id = ?",
            (to, error, now, job.id),
        )
        return replace(job, state=to, error=error, updated_at=now)
