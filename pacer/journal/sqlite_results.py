"""Proved partitions stored in the SQLite journal: `complete_partitions`, step by step in one
write transaction (the file's write lock held: no job's row needs a lock of its own).

A partition that has a row already is skipped, and so is a result of a job no longer queued or
running: each result counts once, and a job completes once. The fleet's journal does the same
in one round trip on the server (`pacer.pgjournal.results`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import replace

from pacer.journal.checks import check_index
from pacer.journal.core import in_lists
from pacer.journal.records import (
    ACTIVE,
    JobRecord,
    JobState,
    PartitionResult,
    PartitionState,
    UnknownJob,
    result_digest,
)
from pacer.journal.rows import JOB_COLUMNS, PARTITION_COLUMNS, job_from_row
from pacer.journal.sqlite_dialect import SqliteDialect


def complete_partitions(sql: SqliteDialect, items: Iterable[PartitionResult]) -> list[JobRecord]:
    """Journal proved partitions in one transaction of ``sql``; the jobs this completed. A job
    with a new result becomes running. If any item names an unknown job (``UnknownJob``) or an
    index out of range (``ValueError``), nothing is written."""
    by_job: dict[str, list[PartitionResult]] = {}
    for item in items:
        by_job.setdefault(item.job_id, []).append(item)
    completed: list[JobRecord] = []
    if not by_job:
        return completed
    with sql.writing() as db:
        jobs: dict[str, JobRecord] = {}
        for markers, part in in_lists(sorted(by_job)):
            rows = db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id IN {markers}", part)
            jobs.update((job.id, job) for job in map(job_from_row, rows.fetchall()))
        for job_id, results in by_job.items():
            if job_id not in jobs:
                raise UnknownJob(job_id)
            check_index(jobs[job_id], max(r.index for r in results))
        now = sql.now(db)
        for job_id, results in by_job.items():
            ended = _store(db, jobs[job_id], results, now)
            if ended is not None:
                completed.append(ended)
    return completed


def _store(
    db: sqlite3.Connection, job: JobRecord, results: list[PartitionResult], now: float
) -> JobRecord | None:
    """Store a job's new results (one ``executemany``) and count them; the job if this
    completed it."""
    if job.state not in ACTIVE:
        return None
    rows = [
        (r.index, PartitionState.COMPLETED, r.synthesis_s, r.gpu_s, json.dumps(r.phases),
         r.digest, r.gpu, now, job.id)
        for r in results
    ]  # fmt: skip
    added = db.executemany(
        f"INSERT OR IGNORE INTO partitions ({PARTITION_COLUMNS}, job_id)"
        " VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)",
        rows,
    ).rowcount
    if added == 0:
        return None
    done = job.partitions_done + added
    if done < job.partitions:
        job = replace(job, state=JobState.RUNNING, partitions_done=done, updated_at=now)
    else:
        digests = db.execute("SELECT digest FROM partitions WHERE job_id = ? ORDER BY idx",
                             (job.id,))  # fmt: skip
        job = replace(job, state=JobState.COMPLETED, partitions_done=done, updated_at=now,
                      result_digest=result_digest(d for (d,) in digests))  # fmt: skip
    db.execute(
        "UPDATE jobs SET state = ?, partitions_done = ?, updated_at = ?, result_digest = ?"
        " WHERE id = ?",
        (job.state, done, now, job.result_digest, job.id),
    )
    return job if job.state == JobState.COMPLETED else None
