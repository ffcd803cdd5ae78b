"""Helpers of the PostgreSQL journal's tests: statements run past the journal, connections
ended, leases run out, and calls made from several threads at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import psycopg

from pacer.journal import LeaseToken, PartitionResult
from pacer.pgjournal import PgJournal

T = TypeVar("T")
TERMINATE_WAIT_MS = 60_000


def sql(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    """Run one statement past the journal; its rows (none for a statement without)."""
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(query, params or None)
        return cursor.fetchall() if cursor.description else []


def terminate(url: str, which: str, *params: object) -> int:
    """End the connections to ``url``'s database that ``which`` selects (a condition on
    pg_stat_activity), as a restart of the server would, and wait until their server processes
    have exited: each holds its locks until then. How many were ended."""
    ended = sql(url, f"SELECT pg_terminate_backend(pid, {TERMINATE_WAIT_MS}) FROM pg_stat_activity"
                     f" WHERE datname = current_database() AND pid <> pg_backend_pid() AND {which}",
                *params)  # fmt: skip
    assert all(done for (done,) in ended), f"a connection outlived {TERMINATE_WAIT_MS} ms"
    return len(ended)


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


def churn(journal: PgJournal, host: str, leases: int) -> None:
    """Claim one partition as ``host`` and commit it, ``leases`` times: each lease row left
    dead in the queue table."""
    for _ in range(leases):
        (claim,) = journal.claim(host, 1)
        (index,) = claim.pending
        lease = LeaseToken(claim.batch, claim.token)
        journal.complete_partitions(
            [PartitionResult(claim.job_id, index, f"d{index}", 1.0, 0.1, lease=lease)]
        )
