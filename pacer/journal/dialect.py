"""What the journal's core (`pacer.journal.core`) asks of a database: a `Connection` to run
statements on, and a `Dialect` for what SQLite and PostgreSQL do differently.

The core writes every statement once, with ``?`` as the parameter marker and SQL both
databases take. A dialect lends a connection to each call, tells the time, and runs the few
steps whose SQL must differ. `pacer.journal.sqlite_dialect.SqliteDialect` and
`pacer.pgjournal.dialect.PgDialect` are the two.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from pacer.journal.records import JobRecord
from pacer.ranges import IndexRanges


class Rows(Protocol):
    """What a statement gives back: its rows, and how many rows it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """A database connection, lent for one call. Statements mark their parameters ``?``."""

    def execute(self, statement: str, args: Sequence[Any] = (), /) -> Rows: ...


C = TypeVar("C", bound=Connection)


class Dialect(Protocol[C]):
    """A database as the core uses it: connections of type ``C``, a clock, and the steps whose
    SQL differs. The attributes are SQL text the core puts into its statements."""

    lock: str
    """What a read of a job ends with to lock its row until the transaction ends; empty where
    a write transaction holds the whole database."""

    by_failures: str
    """What follows ``FROM partitions`` when counting a job's failures, so that the query
    reads their partial index only."""

    partition_rows: str
    """The relation a job's partition rows are read from: the table, or a view over it and a
    packed form."""

    job_tables: tuple[str, ...]
    """The tables, besides ``jobs``, whose rows belong to a job (by ``job_id``)."""

    estimates_row: tuple[str, object]
    """The column and value that name this journal's row of saved estimates."""

    def reading(self) -> AbstractContextManager[C]:
        """A connection for reads, outside any write transaction."""
        ...

    def writing(self) -> AbstractContextManager[C]:
        """A connection in one write transaction: committed when the block ends, rolled back if
        it raises."""
        ...

    def now(self, conn: C) -> float:
        """Wall-clock seconds, for the times a write stores."""
        ...

    def pending(self, conn: C, job: JobRecord) -> IndexRanges:
        """The job's partitions without a completed row, as runs."""
        ...

    def job_added(self, conn: C, job: JobRecord) -> None:
        """In the open transaction: ``job`` was just inserted."""
        ...

    def job_ended(self, conn: C, job_id: str) -> None:
        """In the open transaction: the job completed, failed or was cancelled."""
        ...
