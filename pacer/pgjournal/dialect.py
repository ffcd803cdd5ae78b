"""`PgDialect`: the journal's core on the fleet's PostgreSQL database, where its SQL must
differ from SQLite's.

Each call takes a connection of the pool, so several threads may call at once. The writers
of a job lock its row (``FOR NO KEY UPDATE``) for their transaction: completers of one job,
on any hosts, run one after another, so that a partition's result counts once and only the
transaction that completes a job returns it. Claims do not take that lock (their rows hold no
foreign key), so a commit never holds them up. Results go in as arrays, in one statement; the
database computes the result digest and a job's pending runs, where the rows are. The fleet's
queue (`pacer.pgjournal.leases`) follows each job as it is added, gets results and ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

from psycopg_pool import ConnectionPool

from pacer.journal.records import JobRecord, PartitionResult, PartitionState
from pacer.pgjournal.database import PgConnection, connection, transaction
from pacer.pgjournal.leases import add_runs, drop_finished_runs, drop_runs, free_runs
from pacer.ranges import IndexRanges

# The result digest of `pacer.journal.result_digest`, computed where the digests are.
_RESULT_DIGEST = (
    "SELECT encode(sha256(convert_to(string_agg(digest || chr(10), '' ORDER BY idx), 'UTF8')),"
    " 'hex') FROM partitions WHERE job_id = ?"
)


class PgDialect:
    """The `Dialect` of the connections of ``pool``: ``clock`` gives wall-clock seconds for
    the jobs' times (None: the database's ``now()``, one clock for the whole fleet), and
    ``host`` names this pacer's row of saved estimates (each host has its own)."""

    lock = " FOR NO KEY UPDATE"
    by_failures = ""  # PostgreSQL finds the partial index of failures by itself
    partition_rows = "partition_rows"  # the rows and the packs (`pacer.pgjournal.packs`)
    job_tables: tuple[str, ...] = (
        "partitions", "partition_packs", "attempts", "batches", "job_progress",
    )  # fmt: skip

    def __init__(self, pool: ConnectionPool, clock: Callable[[], float] | None, host: str) -> None:
        self._pool = pool
        self._clock = clock
        self.estimates_row: tuple[str, object] = ("host", host)

    def reading(self) -> AbstractContextManager[PgConnection]:
        """A connection of the pool, in autocommit."""
        return connection(self._pool)

    def writing(self) -> AbstractContextManager[PgConnection]:
        """A connection of the pool, in one transaction."""
        return transaction(self._pool)

    def now(self, conn: PgConnection) -> float:
        """Wall-clock seconds: the clock's, or the database's (the transaction's start)."""
        if self._clock is not None:
            return self._clock()
        row = conn.execute("SELECT extract(epoch FROM now())::double precision").fetchone()
        assert row is not None
        return float(row[0])

    def insert_results(
        self, conn: PgConnection, job_id: str, results: Sequence[PartitionResult], now: float
    ) -> int:
        """Insert the completed partitions that have no row yet, whoever sent them, in one
        statement; how many were new. The leased runs they finish leave the queue."""
        added = conn.execute(
            "INSERT INTO partitions (job_id, idx, state, synthesis_s, gpu_s, phases, digest,"
            " gpu, completed_at) SELECT ?, r.idx, ?, r.synthesis_s, r.gpu_s, r.phases,"
            " r.digest, r.gpu, ? FROM unnest(?::integer[], ?::double precision[],"
            " ?::double precision[], ?::text[], ?::text[], ?::integer[])"
            " AS r (idx, synthesis_s, gpu_s, phases, digest, gpu)"
            " ON CONFLICT (job_id, idx) DO NOTHING RETURNING idx",
            (job_id, PartitionState.COMPLETED, now, [r.index for r in results],
             [float(r.synthesis_s) for r in results], [float(r.gpu_s) for r in results],
             [json.dumps(r.phases) for r in results], [r.digest for r in results],
             [r.gpu for r in results]),
        ).fetchall()  # fmt: skip
        if added:
            drop_finished_runs(conn, job_id, min(added)[0], max(added)[0])
        return len(added)

    def result_digest(self, conn: PgConnection, job_id: str) -> str:
        """The result digest, computed by the database over the job's partition digests."""
        row = conn.execute(_RESULT_DIGEST, (job_id,)).fetchone()
        assert row is not None
        return str(row[0])

    def pending(self, conn: PgConnection, job: JobRecord) -> IndexRanges:
        """The gaps between the runs of the job's completed partitions, which the database
        finds (an index less its rank is constant along a run): as many rows as runs, not as
        completed partitions."""
        runs = conn.execute(
            "SELECT min(idx), max(idx) + 1 FROM (SELECT idx, idx - row_number() OVER"
            " (ORDER BY idx) AS run FROM partitions WHERE job_id = ? AND state = 'completed')"
            " AS done GROUP BY run ORDER BY 1",
            (job.id,),
        )
        return free_runs(0, job.partitions, runs)

    def job_added(self, conn: PgConnection, job: JobRecord) -> None:
        """The new job's runs, free for any host's claim, and word of work to the hosts."""
        add_runs(conn, job)

    def job_ended(self, conn: PgConnection, job_id: str) -> None:
        """The ended job's runs are deleted: no host claims it again."""
        drop_runs(conn, job_id)
