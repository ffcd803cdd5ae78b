"""What the PostgreSQL journal's parts share: the connection pool, the clock, this host's name
and the lease a claim takes; transactions, and a job read (and locked) by id."""

from __future__ import annotations

import math
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ClassVar

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

from pacer.journal.connection import job_from_row as job_record
from pacer.journal.records import ACTIVE, TERMINAL, JobRecord, UnknownJob
from pacer.journal.schema import JOB_COLUMNS

__all__ = ["ACTIVE", "JOB_COLUMNS", "TERMINAL", "Connection", "Database", "job_record", "open_pool"]

Connection = psycopg.Connection[TupleRow]

LEASE_S = 30.0
TIMEOUT_S = 5.0
POOL_SIZE = 4


def open_pool(url: str, size: int = POOL_SIZE, timeout_s: float = TIMEOUT_S) -> ConnectionPool:
    """A pool of up to ``size`` autocommit connections to ``url``, open once its first
    connection is. ``timeout_s`` bounds connecting, waiting for a connection, and each
    statement (``statement_timeout``): a slow database fails a call instead of stalling it."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"pool size must be an integer >= 1, got {size!r}")
    if not timeout_s > 0 or not math.isfinite(timeout_s):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")

    def configure(conn: Connection) -> None:
        conn.execute(f"SET statement_timeout = {math.ceil(timeout_s * 1000)}")

    pool: ConnectionPool = ConnectionPool(
        url, min_size=1, max_size=size, timeout=timeout_s, configure=configure, open=False,
        kwargs={"autocommit": True, "connect_timeout": max(1, math.ceil(timeout_s))},
        name="pacer-journal",
    )  # fmt: skip
    try:
        pool.open(wait=True, timeout=timeout_s)
    except BaseException:
        pool.close()
        raise
    return pool


class Database:
    """The pool (`open_pool`), ``clock`` (wall-clock seconds for the jobs' times; None: the
    database's ``now()``, one clock for the whole fleet), ``host`` (this pacer's name in the
    fleet: whose estimates, whose leases) and ``lease_s`` (how long a claim or a renewal holds
    partitions, on the database's clock). Safe to use from several threads: each call takes a
    connection of its own."""

    Error: ClassVar[type[Exception]] = psycopg.Error
    OperationalError: ClassVar[type[Exception]] = psycopg.OperationalError

    def __init__(
        self, pool: ConnectionPool, clock: Callable[[], float] | None = None,
        host: str | None = None, lease_s: float = LEASE_S,
    ) -> None:  # fmt: skip
        if not isinstance(lease_s, (int, float)) or not 0 < lease_s < math.inf:
            raise ValueError(f"lease_s must be a finite number of seconds > 0, got {lease_s!r}")
        host = socket.gethostname() if host is None else host
        if not isinstance(host, str) or not host or host != host.strip():
            raise ValueError(f"host must be a non-empty name without edge spaces, got {host!r}")
        self._pool = pool
        self._clock = clock
        self.host = host
        self.lease_s = float(lease_s)

    def close(self) -> None:
        """Close the pool; later calls raise ``psycopg_pool.PoolClosed``. Idempotent."""
        self._pool.close()

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        with self._pool.connection() as conn:
            yield conn

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        with self._pool.connection() as conn, conn.transaction():
            yield conn

    def _now(self, conn: Connection) -> float:
        """Wall-clock seconds: the clock's, or the database's (the transaction's start)."""
        if self._clock is not None:
            return self._clock()
        row = conn.execute("SELECT extract(epoch FROM now())::double precision").fetchone()
        assert row is not None
        return float(row[0])

    def _read_job(self, conn: Connection, job_id: str, lock: bool = False) -> JobRecord | None:
        """The job, or None; ``lock``: held until the transaction ends, against other writers
        of the job (not against claims, whose foreign-key-free rows do not need it)."""
        locking = " FOR NO KEY UPDATE" if lock else ""
        row = conn.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = %s{locking}", (job_id,)
        ).fetchone()
        return None if row is None else job_record(row)

    def _require(self, conn: Connection, job_id: str, lock: bool = False) -> JobRecord:
        job = self._read_job(conn, job_id, lock)
        if job is None:
            raise UnknownJob(job_id)
        return job
