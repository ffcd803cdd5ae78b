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

from collections.abc import Callable
from contextlib import AbstractContextManager

from psycopg_pool import ConnectionPool

from pacer.journal.records import JobRecord
from pacer.pgjournal.database import PgConnection, connection, transaction
from pacer.pgjournal.leases import add_runs, drop_runs, free_runs
from pacer.ranges import IndexRanges


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
