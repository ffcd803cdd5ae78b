"""Helpers of the PostgreSQL journal's tests: statements run past the journal, leases run
out, and calls made from several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import psycopg

T = TypeVar("T")


def sql(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    """Run one statement past the journal; its rows (none for a statement without)."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params or None)
        return cursor.fetchall() if cursor.description else []


def expire(url: str, host: str) -> None:
    """``host``'s leases run out now, as if it had died a lease ago."""
    sql(url, "UPDATE batches SET lease_until = now() - interval '1 s' WHERE claimed_by = %s", host)


def at_once(count: int, call: Callable[[int], T]) -> list[T]:
    """``call(i)`` for i in range(count), on as many threads released together."""
    barrier = threading.Barrier(count)

    def run(i: int) -> T:
        barrier.wait()
        return call(i)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))
