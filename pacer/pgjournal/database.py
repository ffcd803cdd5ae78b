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
# TCP keepalives, both ends of each connection (s, s, probes): a peer gone silent (a host cut
# off, its network dropped) is found dead within KEEPALIVE_IDLE_S + interval x count = 25 s,
# not the kernel's default of over two hours; the server then ends its session and its locks.
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 3


def connect_options(timeout_s: float) -> dict[str, Any]:
    """libpq's options for pacer's connections: a connect timeout of ``timeout_s`` and TCP
    keepalives from this side (a server gone silent fails the call waiting on it)."""
    return {
        "connect_timeout": max(1, math.ceil(timeout_s)),
        "keepalives": 1,
        "keepalives_idle": KEEPALIVE_IDLE_S,
        "keepalives_interval": KEEPALIVE_INTERVAL_S,
        "keepalives_count": KEEPALIVE_COUNT,
    }


def session_settings(timeout_s: float) -> str:
    """The SET statements every pacer session runs as it connects, so that no host can hold a
    lock others need for long, whatever it does or fails to do:

    - ``statement_timeout`` = ``timeout_s``: a statement, a lock wait included, fails after it;
    - ``lock_timeout`` = ``timeout_s``: a lock wait fails after it too (also where a session
      raises its statement timeout);
    - ``idle_in_transaction_session_timeout`` = ``timeout_s`` / 2: a session idle inside a
      transaction (its host frozen, or cut off, between two statements) is ended, its locks
      released, before a statement waiting on them gives up;
    - the server's TCP keepalives and ``tcp_user_timeout``: a client gone silent is found dead
      (ignored on a Unix socket).
    """
    ms = math.ceil(timeout_s * 1000)
    unacked_ms = (KEEPALIVE_IDLE_S + KEEPALIVE_INTERVAL_S * KEEPALIVE_COUNT) * 1000
    return (
        f"SET statement_timeout = {ms}; SET lock_timeout = {ms};"
        f" SET idle_in_transaction_session_timeout = {max(1, ms // 2)};"
        f" SET tcp_keepalives_idle = {KEEPALIVE_IDLE_S};"
        f" SET tcp_keepalives_interval = {KEEPALIVE_INTERVAL_S};"
        f" SET tcp_keepalives_count = {KEEPALIVE_COUNT}; SET tcp_user_timeout = {unacked_ms}"
    )


def open_pool(url: str, size: int = POOL_SIZE, timeout_s: float = TIMEOUT_S) -> ConnectionPool:
    """A pool of up to ``size`` autocommit connections to ``url``, open once its first
    connection is. ``timeout_s`` bounds connecting, waiting for a connection, and each
    statement (``statement_timeout``): a slow database fails a call instead of stalling it."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"pool size must be an integer >= 1, got {size!r}")
    if not timeout_s > 0 or not math.isfinite(timeout_s):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")

    def configure(conn: RawConnection) -> None:
        conn.execute(session_settings(timeout_s))

    pool: ConnectionPool = ConnectionPool(
        url, min_size=1, max_size=size, timeout=timeout_s, configure=configure, open=False,
        kwargs={"autocommit": True, **connect_options(timeout_s)},
        # A connection lost (the server restarted) is retried with a backoff that doubles;
        # bounded so, it never waits long once the server is back: the pool gives the
        # attempt up and its next call starts a new one.
        reconnect_timeout=max(1.0, 2 * timeout_s),
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
