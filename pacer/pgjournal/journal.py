"""`PgJournal`: the job journal in a PostgreSQL database that a fleet of pacers shares.

The SQLite journal's methods with its semantics (`pacer.journal.SqliteJournal` states each
one's contract), plus the fleet's queue (`pacer.pgjournal.leases`). Every write is one transaction,
committed when the method returns. The writers of a job lock its row (``FOR NO KEY UPDATE``)
for their transaction: completers of one job, on any hosts, run one after another, so that a
partition's result counts once and only the transaction that completes a job returns it.
Claims do not take that lock (their rows hold no foreign key), so a commit never holds them up.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

from pacer.journal.checks import (
    check_index,
    check_limit,
    check_text,
    checked_params_json,
    exhausted,
    keyed_request,
)
from pacer.journal.failures import exhausted_statement
from pacer.journal.records import (
    IdempotencyConflict,
    JobRecord,
    JobState,
    PartitionResult,
    PartitionState,
    UnknownJob,
    check_duration,
)
from pacer.journal.saved_estimates import estimates_json
from pacer.pgjournal.database import (
    ACTIVE,
    JOB_COLUMNS,
    LEASE_S,
    POOL_SIZE,
    TERMINAL,
    TIMEOUT_S,
    Connection,
    job_record,
    open_pool,
)
from pacer.pgjournal.host_connection import HostConnection
from pacer.pgjournal.leases import WORK_CHANNEL, FleetQueue, lanes
from pacer.pgjournal.reads import JournalReads
from pacer.pgjournal.schema import migrate

# The result digest of `pacer.journal.result_digest`, computed where the digests are.
_RESULT_DIGEST = (
    "SELECT encode(sha256(convert_to(string_agg(digest || chr(10), '' ORDER BY idx), 'UTF8')),"
    " 'hex') FROM partitions WHERE job_id = %s"
)


class PgJournal(JournalReads, FleetQueue):
    """The job journal in PostgreSQL, shared by the hosts of a fleet: open one per host with
    `connect`, which migrates the schema.

    >>> with PgJournal.connect("postgresql://pacer@db/pacer", host="gpu-1") as journal:
    ...     job = journal.add_job(4, "sha-chain", {"depth": 20})
    ...     claims = journal.claim("gpu-1", 64)
    """

    @classmethod
    def connect(
        cls, url: str, clock: Callable[[], float] | None = None, *, host: str | None = None,
        lease_s: float = LEASE_S, pool_size: int = POOL_SIZE, timeout_s: float = TIMEOUT_S,
    ) -> PgJournal:  # fmt: skip
        """Open a pool on the database at ``url`` and bring its schema to this version (hosts
        starting at once take turns); see `Database` and `open_pool` for the rest."""
        pool = open_pool(url, pool_size, timeout_s)
        try:
            with pool.connection() as conn:
                migrate(conn)
            return cls(pool, clock, host, lease_s)
        except BaseException:
            pool.close()
            raise

    _host_connection: HostConnection | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Let the host's name go and close the pool; later calls raise. Idempotent."""
        if self._host_connection is not None:
            self._host_connection.close()
        super().close()

    def hold_host(self) -> None:
        """Take this host's name (``host``) on a connection of its own, held until `close`:
        a second pacer of the same name is refused (`HostInUseError`, naming the holder)."""
        conninfo = self._pool.conninfo
        conninfo = conninfo if isinstance(conninfo, str) else conninfo()
        connection = HostConnection(conninfo, self.host, self._pool.timeout)
        connection.open()
        self._host_connection = connection

    def wait_for_work(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for word that partitions may be free to claim (a job
        accepted or leases given back, by any host); whether word came. A lost connection is
        opened again, the host's name taken back (`HostInUseError` if another pacer took it);
        ``OperationalError`` while the server cannot be reached. After `hold_host` only."""
        if self._host_connection is None:
            raise RuntimeError("wait_for_work needs the host's name: call hold_host() first")
        return self._host_connection.wait(timeout_s)

    def check_file(self) -> None:
        """Nothing to check: the journal is a server's, not a file this host could lose."""

    def probe(self) -> None:
        """Commit a write that changes nothing: raises as any write would now (the server
        down, read-only, out of disk, too slow for the statement timeout)."""
        with self._connection() as conn:
            conn.execute("UPDATE pacer_schema SET version = version")

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(
        self, partitions: int, workload: str | None, params: dict[str, Any], priority: int = 0
    ) -> JobRecord:
        """Journal a queued job of ``partitions`` partitions, free for any host's claim."""
        params_json = checked_params_json(partitions, workload, params, priority)
        with self._transaction() as conn:
            job = self._insert_job(conn, partitions, workload, params_json, priority, None, None)
        assert job is not None  # no key, no conflict
        return job

    def add_job_once(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> tuple[JobRecord, bool]:  # fmt: skip
        """``add_job`` under an idempotency key: the job, and whether it is new. Hosts that
        take the same key at once create one job: the others wait for it and return it."""
        params_json, digest = keyed_request(key, partitions, workload, params, priority)
        with self._transaction() as conn:
            job = self._insert_job(conn, partitions, workload, params_json, priority, key, digest)
            if job is not None:
                return job, True
            found = self._job_for_key(conn, key, digest)
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
        with self._connection() as conn:
            return self._job_for_key(conn, key, digest)

    def _job_for_key(self, conn: Connection, key: str, digest: str) -> JobRecord | None:
        row = conn.execute(
            f"SELECT {JOB_COLUMNS}, request_digest FROM jobs WHERE idempotency_key = %s", (key,)
        ).fetchone()
        if row is None:
            return None
        if row[-1] != digest:
            raise IdempotencyConflict(key, row[0])
        return job_record(row[:-1])

    def _insert_job(
        self, conn: Connection, partitions: int, workload: str | None, params_json: str,
        priority: int, key: str | None, digest: str | None,
    ) -> JobRecord | None:  # fmt: skip
        """Insert a queued job and its free runs; None if ``key`` names a job already."""
        now = self._now(conn)
        job_id = uuid.uuid4().hex[:16]
        row = conn.execute(
            f"INSERT INTO jobs ({JOB_COLUMNS}, idempotency_key, request_digest)"
            " VALUES (%s, %s, %s, 0, %s, %s, %s, %s, %s, NULL, NULL, %s, %s)"
            " ON CONFLICT (idempotency_key) DO NOTHING RETURNING seq",
            (job_id, JobState.QUEUED, partitions, workload, params_json, priority, now, now, key,
             digest),
        ).fetchone()  # fmt: skip
        if row is None:
            return None
        starts, stops = zip(*lanes(partitions), strict=True)
        conn.execute(
            "INSERT INTO batches (job_id, priority, created_at, seq, first, start, stop)"
            " SELECT %s, %s, %s, %s, l.start, l.start, l.stop"
            " FROM unnest(%s::integer[], %s::integer[]) AS l (start, stop)",
            (job_id, priority, now, row[0], list(starts), list(stops)),
        )
        conn.execute(f"NOTIFY {WORK_CHANNEL}")  # delivered when the transaction commits
        return JobRecord(
            job_id, JobState.QUEUED, partitions, 0, workload, json.loads(params_json), priority,
            now, now, None, None,
        )  # fmt: skip

    def _transition(
        self, conn: Connection, job: JobRecord, to: JobState, error: str | None = None
    ) -> JobRecord:
        """Move a queued or running job to ``to``, in the open transaction; others are as is.
        A job that ends has its runs deleted: no host claims it again."""
        if job.state not in ACTIVE or job.state == to:
            return job
        row = conn.execute(
            f"UPDATE jobs SET state = %s, error = %s, updated_at = %s WHERE id = %s"
            f" RETURNING {JOB_COLUMNS}",
            (to, error, self._now(conn), job.id),
        ).fetchone()
        assert row is not None  # locked by the caller
        if to in TERMINAL:
            conn.execute("DELETE FROM batches WHERE job_id = %s", (job.id,))
        return job_record(row)

    def mark_running(self, job_id: str) -> JobRecord:
        """A queued job's first partitions were dispatched: it is running. Others are unchanged."""
        with self._transaction() as conn:
            return self._transition(conn, self._require(conn, job_id, lock=True), JobState.RUNNING)

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued or running job (no host claims it again; leases held on it are
        dropped at their next renewal); a finished one is returned as is; None if unknown."""
        with self._transaction() as conn:
            job = self._read_job(conn, job_id, lock=True)
            return None if job is None else self._transition(conn, job, JobState.CANCELLED)

    # -- partitions ---------------------------------------------------------------------------
    def complete_partitions(self, items: Iterable[PartitionResult]) -> list[JobRecord]:
        """Journal proved partitions in one transaction; return the jobs this completed.

        Each result is stored once (a partition with a result already is skipped, whoever sent
        it), and so is counted once; so a job completes once, fleet-wide. Results of a job no
        longer queued or running are skipped. ``UnknownJob`` or ``ValueError`` (an index out of
        range) for any item: nothing is written.
        """
        by_job: dict[str, list[PartitionResult]] = {}
        for item in items:
            by_job.setdefault(item.job_id, []).append(item)
        completed: list[JobRecord] = []
        if not by_job:
            return completed
        with self._transaction() as conn:
            rows = conn.execute(  # in one order: two commits of the same jobs cannot deadlock
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ANY(%s) ORDER BY id FOR NO KEY UPDATE",
                (sorted(by_job),),
            ).fetchall()
            jobs = {job.id: job for job in map(job_record, rows)}
            for job_id, results in by_job.items():
                if job_id not in jobs:
                    raise UnknownJob(job_id)
                check_index(jobs[job_id], max(r.index for r in results))
            now = self._now(conn)
            for job_id, results in by_job.items():
                ended = self._store_results(conn, jobs[job_id], results, now)
                if ended is not None:
                    completed.append(ended)
        return completed

    def _store_results(
        self, conn: Connection, job: JobRecord, results: list[PartitionResult], now: float
    ) -> JobRecord | None:
        """Insert a locked job's new results and count them; the job if this completed it."""
        if job.state not in ACTIVE:
            return None
        added = conn.execute(
            "INSERT INTO partitions (job_id, idx, state, synthesis_s, gpu_s, phases, digest,"
            " gpu, completed_at) SELECT %s, r.idx, %s, r.synthesis_s, r.gpu_s, r.phases,"
            " r.digest, r.gpu, %s FROM unnest(%s::integer[], %s::double precision[],"
            " %s::double precision[], %s::text[], %s::text[], %s::integer[])"
            " AS r (idx, synthesis_s, gpu_s, phases, digest, gpu)"
            " ON CONFLICT (job_id, idx) DO NOTHING RETURNING idx",
            (job.id, PartitionState.COMPLETED, now, [r.index for r in results],
             [float(r.synthesis_s) for r in results], [float(r.gpu_s) for r in results],
             [json.dumps(r.phases) for r in results], [r.digest for r in results],
             [r.gpu for r in results]),
        ).fetchall()  # fmt: skip
        if not added:
            return None
        done = job.partitions_done + len(added)
        if done < job.partitions:
            conn.execute(
                "UPDATE jobs SET state = %s, partitions_done = %s, updated_at = %s WHERE id = %s",
                (JobState.RUNNING, done, now, job.id),
            )
            # The leased runs these results finished: nothing of them is left to claim.
            conn.execute(
                "DELETE FROM batches b WHERE b.job_id = %s AND b.claimed_by IS NOT NULL"
                " AND b.start <= %s AND b.stop > %s AND b.stop - b.start = (SELECT count(*)"
                " FROM partitions p WHERE p.job_id = b.job_id AND p.idx >= b.start"
                " AND p.idx < b.stop)",
                (job.id, max(added)[0], min(added)[0]),
            )
            return None
        row = conn.execute(
            f"UPDATE jobs SET state = %s, partitions_done = %s, updated_at = %s,"
            f" result_digest = ({_RESULT_DIGEST}) WHERE id = %s RETURNING {JOB_COLUMNS}",
            (JobState.COMPLETED, done, now, job.id, job.id),
        ).fetchone()
        assert row is not None
        conn.execute("DELETE FROM batches WHERE job_id = %s", (job.id,))
        return job_record(row)

    def fail_partition(self, job_id: str, index: int, error: str) -> JobRecord:
        """A partition failed: so does its queued or running job, with ``error``. Partitions
        not completed stay pending. A finished job is returned as is."""
        check_text("error", error)
        with self._transaction() as conn:
            job = self._require(conn, job_id, lock=True)
            check_index(job, index)
            return self._fail(conn, job, index, error) if job.state in ACTIVE else job

    def record_attempt(
        self, job_id: str, index: int, reason: str, gpu: int | None, max_attempts: int
    ) -> tuple[int, JobRecord]:
        """Journal a failed attempt of a partition of a queued or running job; the attempt's
        number (from 1) and the job, failed once that is ``max_attempts``. Nothing is written
        for a finished job or partition (number 0)."""
        check_text("reason", reason)
        check_limit("max_attempts", max_attempts)
        with self._transaction() as conn:
            job = self._require(conn, job_id, lock=True)
            check_index(job, index)
            finished = conn.execute(
                "SELECT 1 FROM partitions WHERE job_id = %s AND idx = %s", (job_id, index)
            ).fetchone()
            if job.state not in ACTIVE or finished is not None:
                return 0, job
            row = conn.execute(
                "INSERT INTO attempts (job_id, idx, attempt, reason, gpu, at)"
                " SELECT %s, %s, count(*) + 1, %s, %s, %s FROM attempts"
                " WHERE job_id = %s AND idx = %s RETURNING attempt",
                (job_id, index, reason, gpu, self._now(conn), job_id, index),
            ).fetchone()
            assert row is not None
            attempt = int(row[0])
            if attempt < max_attempts:
                return attempt, job
            return attempt, self._fail(conn, job, index, exhausted(index, attempt, reason))

    def _fail(self, conn: Connection, job: JobRecord, index: int, error: str) -> JobRecord:
        """In the open transaction: partition ``index`` failed, and so does its active job."""
        conn.execute(
            "INSERT INTO partitions (job_id, idx, state, phases, error, completed_at)"
            " VALUES (%s, %s, %s, '{}', %s, %s) ON CONFLICT (job_id, idx) DO NOTHING",
            (job.id, index, PartitionState.FAILED, error, self._now(conn)),
        )
        return self._transition(conn, job, JobState.FAILED, error)

    def fail_exhausted(self, max_attempts: int) -> list[JobRecord]:
        """Fail every queued or running job with a pending partition that has had
        ``max_attempts`` failed attempts or more; the jobs failed."""
        check_limit("max_attempts", max_attempts)
        failed: list[JobRecord] = []
        with self._transaction() as conn:
            last = "(array_agg(a.reason ORDER BY a.attempt DESC))[1]"
            rows = conn.execute(exhausted_statement("%s", last), (*ACTIVE, max_attempts)).fetchall()
            for job_id, index, count, reason in rows:
                job = self._require(conn, job_id, lock=True)
                if job.state in ACTIVE:  # else failed by an earlier partition of this round
                    failed.append(self._fail(conn, job, index, exhausted(index, count, reason)))
        return failed

    # -- estimates and retention --------------------------------------------------------------
    def save_estimates(self, values: Mapping[str, float | None], key: str | None = None) -> None:
        """Store this host's controller's estimates (seconds, or None if unknown), replacing
        those it saved before, with ``key``: what they are valid for. Each host has its own."""
        blob = estimates_json(values, key)
        with self._connection() as conn:
            conn.execute(
                "INSERT INTO estimates (host, estimates) VALUES (%s, %s)"
                " ON CONFLICT (host) DO UPDATE SET estimates = excluded.estimates",
                (self.host, blob),
            )

    def prune(self, retention_s: float) -> int:
        """Delete finished jobs, their partitions and attempts, last updated more than
        ``retention_s`` seconds ago; how many jobs were deleted."""
        check_duration("retention_s", retention_s)
        with self._transaction() as conn:
            row = conn.execute(
                "WITH gone AS (DELETE FROM jobs WHERE state IN (%s, %s, %s) AND updated_at < %s"
                " RETURNING id),"
                " p AS (DELETE FROM partitions WHERE job_id IN (SELECT id FROM gone)),"
                " a AS (DELETE FROM attempts WHERE job_id IN (SELECT id FROM gone)),"
                " b AS (DELETE FROM batches WHERE job_id IN (SELECT id FROM gone))"
                " SELECT count(*) FROM gone",
                (*TERMINAL, self._now(conn) - retention_s),
            ).fetchone()
        return 0 if row is None else int(row[0])
