"""The stores a journal can live in, for tests that hold every backend to one contract: each
opens journals on one store (a second open is a restart), reads its tables directly, and counts
the rows a journal reads."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import psycopg

from pacer.journal import JobRecord, PartitionResult, SqliteJournal
from pacer.pgjournal import PgJournal

AnyJournal = SqliteJournal | PgJournal
HOST = "host-a"


def current(journal: AnyJournal, job_id: str) -> JobRecord:
    """The job as journaled now (it must be there)."""
    job = journal.get_job(job_id)
    assert job is not None
    return job


def proved(job_id: str, index: int, digest: str | None = None) -> PartitionResult:
    """A proved partition to journal (digest ``d<index>`` unless given)."""
    return PartitionResult(job_id, index, digest or f"d{index}", synthesis_s=3.0, gpu_s=0.5)


class Rows:
    """How many rows the database handed to the journal."""

    def __init__(self) -> None:
        self.count = 0


class SqliteStore:
    """A journal file in a temporary directory."""

    name = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, clock: Callable[[], float] | None = None) -> SqliteJournal:
        return SqliteJournal(self.path) if clock is None else SqliteJournal(self.path, clock)

    def ids_in(self, table: str, column: str = "job_id") -> list[str]:
        """The distinct values of ``column`` in ``table``, read past the journal."""
        with closing(sqlite3.connect(self.path)) as db:
            rows = db.execute(f"SELECT DISTINCT {column} FROM {table} ORDER BY 1")
            return [value for (value,) in rows]

    @contextmanager
    def counting_rows(self, journal: AnyJournal) -> Iterator[Rows]:
        assert isinstance(journal, SqliteJournal)
        rows = Rows()

        def counting(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> tuple[Any, ...]:
            rows.count += 1
            return row

        journal._db.row_factory = counting
        try:
            yield rows
        finally:
            journal._db.row_factory = None


class PgStore:
    """A fresh database on the tests' PostgreSQL server; journals on it are one host's."""

    name = "postgres"

    def __init__(self, url: str) -> None:
        self.url = url

    def open(self, clock: Callable[[], float] | None = None, host: str = HOST) -> PgJournal:
        return PgJournal.connect(self.url, clock, host=host)

    def ids_in(self, table: str, column: str = "job_id") -> list[str]:
        with psycopg.connect(self.url) as conn:
            rows = conn.execute(f"SELECT DISTINCT {column} FROM {table} ORDER BY 1")
            return [value for (value,) in rows]

    @contextmanager
    def counting_rows(self, journal: AnyJournal) -> Iterator[Rows]:
        """Counts on the pool's one connection (the tests call from one thread)."""
        assert isinstance(journal, PgJournal)
        rows = Rows()

        def counting(cursor: Any) -> Callable[[Any], tuple[Any, ...]]:
            def make_row(values: Any) -> tuple[Any, ...]:
                rows.count += 1
                return tuple(values)

            return make_row

        with journal._pool.connection() as conn:
            previous = conn.row_factory
            conn.row_factory = counting
        try:
            yield rows
        finally:
            with journal._pool.connection() as conn:
                conn.row_factory = previous


Store = SqliteStore | PgStore
