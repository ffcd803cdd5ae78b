"""The fleet's PostgreSQL database as the journal uses it: a pool of connections
(`open_pool`), and `PgConnection`, a pooled connection whose statements mark their parameters
``?`` as the journal's core writes them."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool

RawConnection = psycopg.Connection[TupleRow]

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

    def configure(conn: RawConnection) -> None:
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


@functools.lru_cache(maxsize=1024)
def _psycopg_form(statement: str) -> str:
    """``statement`` with each ``?`` marker as psycopg's ``%s``."""
    return statement.replace("?", "%s")


class PgConnection:
    """A connection of the pool for one call: `execute` takes statements that mark their
    parameters ``?`` (the journal's statements hold no other ``?`` and no ``%``)."""

    def __init__(self, conn: RawConnection) -> None:
        self.conn = conn

    def execute(self, statement: str, args: Sequence[Any] = (), /) -> psycopg.Cursor[TupleRow]:
        """Run one statement; its cursor."""
        return self.conn.execute(_psycopg_form(statement), args or None)


@contextmanager
def connection(pool: ConnectionPool) -> Iterator[PgConnection]:
    """A connection of ``pool`` for a call, in autocommit: each statement commits alone."""
    with pool.connection() as conn:
        yield PgConnection(conn)


@contextmanager
def transaction(pool: ConnectionPool) -> Iterator[PgConnection]:
    """A connection of ``pool`` in one transaction: committed when the block ends, rolled
    back if it raises."""
    with pool.connection() as conn, conn.transaction():
        yield PgConnection(conn)
