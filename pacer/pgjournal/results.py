"""Proved partitions stored in the fleet's database in one round trip: `commit_results` calls
``pacer_commit`` (`pacer.pgjournal.functions`), which checks each result's lease and stores
the results, counts the jobs' progress and completes them in one CALL (the jobs it completed
are then read).

The server runs a CALL to its end by itself: a host that freezes or loses its network while it
commits holds no lock for longer than the CALL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import psycopg
from psycopg_pool import ConnectionPool

from pacer.journal.records import JobRecord, PartitionResult, UnknownJob
from pacer.journal.rows import JOB_COLUMNS, job_from_row
from pacer.pgjournal.database import connection

log = logging.getLogger("pacer.journal")

# pacer_commit's errors (SQLSTATE): nothing was written.
UNKNOWN_JOB = "PCR01"
INDEX_OUT_OF_RANGE = "PCR02"

_COMMIT = (
    "CALL pacer_commit(?, ?::double precision, ?::text[], ?::bigint[], ?::bigint[],"
    " ?::integer[], ?::double precision[], ?::double precision[], ?::text[], ?::text[],"
    " ?::integer[])"
)


def commit_results(
    pool: ConnectionPool, host: str, items: Sequence[PartitionResult], now: float | None
) -> tuple[list[JobRecord], int]:
    """Store ``items`` for ``host``, in one CALL: the jobs this completed, and how many
    results were refused because their lease is no longer ``host``'s (lapsed and taken by
    another host, or given back). Results without a lease are stored as they come; a result
    already stored, or of a job no longer queued or running, is skipped. ``now``: the jobs'
    time (None: the database's). ``UnknownJob`` or ``ValueError`` (an index past its job's
    partitions): nothing is written."""
    args = (
        host, now, [r.job_id for r in items],
        [None if r.lease is None else r.lease.batch for r in items],
        [None if r.lease is None else r.lease.token for r in items],
        [r.index for r in items], [float(r.synthesis_s) for r in items],
        [float(r.gpu_s) for r in items], [json.dumps(r.phases) for r in items],
        [r.digest for r in items], [r.gpu for r in items],
    )  # fmt: skip
    try:
        with connection(pool) as db:
            row = db.execute(_COMMIT, args).fetchone()
            assert row is not None
            ended, refused = row
            completed = [] if not ended else [
                job_from_row(job) for job in db.execute(
                    f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ANY(?) ORDER BY id", (ended,))
            ]  # fmt: skip
    except psycopg.Error as exc:
        if exc.sqlstate == UNKNOWN_JOB:
            raise UnknownJob(exc.diag.message_primary or "") from None
        if exc.sqlstate == INDEX_OUT_OF_RANGE:
            raise ValueError(exc.diag.message_primary) from None
        raise
    if refused:
        log.warning(
            "%d results not stored: their leases are no longer %s's (they lapsed and another "
            "host took them)", refused, host,
        )  # fmt: skip
    return completed, refused


def settle_jobs(pool: ConnectionPool, now: float | None) -> list[JobRecord]:
    """Complete the jobs whose results are all stored but whose last commit lost its count
    (``pacer_settle``, one round trip); the jobs it completed. Cheap (it reads the active jobs
    and their progress rows only), idempotent, and safe on many hosts at once: a job is
    completed by one of them. ``now``: the jobs' time (None: the database's)."""
    with connection(pool) as db:
        ended = [job_id for (job_id,) in db.execute("SELECT pacer_settle(?)", (now,))]
        completed = [] if not ended else [
            job_from_row(job) for job in db.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ANY(?) ORDER BY id", (ended,))
        ]  # fmt: skip
    for job in completed:
        log.warning(
            "job completed by the sweep: its last commit stored every result but lost its "
            "count", extra={"job": job.id},
        )  # fmt: skip
    return completed
