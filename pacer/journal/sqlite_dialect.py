"""`SqliteDialect`: the journal's core on an SQLite file, where its SQL must differ from
PostgreSQL's.

One connection, used from one thread. A write transaction takes the file's write lock at once
(``BEGIN IMMEDIATE``), so a job's row needs no lock of its own. Results are inserted in one
``executemany``; the result digest and a job's pending runs are computed here, as the rows
stream in primary-key order.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from pacer.journal.records import JobRecord, PartitionState
from pacer.ranges import IndexRanges


class SqliteDialect:
    """The `Dialect` of the SQLite connection ``db``: ``clock`` gives wall-clock seconds, and
    ``transaction`` opens each write transaction on ``db`` (`pacer.journal.schema.transaction`
    or a wrapper of it)."""

    lock = ""
    by_failures = "INDEXED BY partitions_failed"  # else SQLite reads the job's every row
    partition_rows = "partitions"  # SQLite keeps no packed form
    job_tables: tuple[str, ...] = ("partitions", "attempts")
    estimates_row: tuple[str, object] = ("id", 1)  # one row of estimates

    def __init__(
        self, db: sqlite3.Connection, clock: Callable[[], float],
        transaction: Callable[[], AbstractContextManager[sqlite3.Connection]],
    ) -> None:  # fmt: skip
        self._db = db
        self._clock = clock
        self._transaction = transaction

    def reading(self) -> AbstractContextManager[sqlite3.Connection]:
        """The connection, as it is."""
        return nullcontext(self._db)

    def writing(self) -> AbstractContextManager[sqlite3.Connection]:
        """The connection, in one ``BEGIN IMMEDIATE`` transaction."""
        return self._transaction()

    def now(self, conn: sqlite3.Connection) -> float:
        """The clock's wall-clock seconds."""
        return self._clock()

    def pending(self, conn: sqlite3.Connection, job: JobRecord) -> IndexRanges:
        """The gaps between the job's completed partitions, read in primary-key order and
        streamed: no list of indices."""
        rows = conn.execute(
            "SELECT idx FROM partitions WHERE job_id = ? AND state = ? ORDER BY idx",
            (job.id, PartitionState.COMPLETED),
        )
        return IndexRanges.excluding(job.partitions, (idx for (idx,) in rows))

    def job_added(self, conn: sqlite3.Connection, job: JobRecord) -> None:
        """Nothing more to write for a new job."""

    def job_ended(self, conn: sqlite3.Connection, job_id: str) -> None:
        """Nothing more to write for a job that ended."""
