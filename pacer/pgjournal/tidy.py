"""Vacuuming the fleet's queue as it churns.

Every claim inserts a lease row into ``batches`` and every commit deletes it: at a thousand
commits a second the table gains a thousand dead rows a second. The claim's scan for lapsed
leases walks the index on ``lease_until`` from its start, so each dead lease older than the
lease time costs every claim a little, until a vacuum removes it. Autovacuum visits a database
at most once a minute (``autovacuum_naptime``), by which time tens of thousands have piled up
and claims have slowed by half. So each host, after renewing its leases, vacuums the queue
when its dead rows pass `QUEUE_DEAD_ROWS`. One host vacuums at a time: one that finds another
vacuuming skips its turn rather than wait (``SKIP_LOCKED``). The vacuum leaves the table's
empty pages at its end (``TRUNCATE false``, and the table's ``vacuum_truncate`` for
autovacuum): the churn fills them again within seconds, and cutting them off needs the
table's exclusive lock, which a vacuum tries for up to 5 s while claims and commits keep
taking the table; a host's statement timeout would end the vacuum there, its work uncounted,
and the next renewal would start another. Each statement stands alone, so a pooler in
transaction mode can sit between the hosts and the server.
"""

from __future__ import annotations

import logging
import time

import psycopg
from psycopg_pool import ConnectionPool

from pacer.pgjournal.database import connection

log = logging.getLogger(__name__)

# Dead rows in the queue table past which a host vacuums it: a few seconds of churn at a
# thousand commits a second, and a vacuum of this table takes milliseconds.
QUEUE_DEAD_ROWS = 5_000

# A vacuum the server skips (pacer's role may not vacuum the table) is logged at most this
# often (s): each renewal would otherwise repeat it.
SKIPPED_WARNING_EVERY_S = 600.0
_last_skipped_warning = -float("inf")
LOCK_NOT_AVAILABLE = "55P03"  # the SQLSTATE of a skip under SKIP_LOCKED


def queue_dead_rows(pool: ConnectionPool) -> int:
    """Dead rows in ``batches`` as the server's statistics count them (they lag the writes by
    up to a second of each session's activity)."""
    with connection(pool) as db:
        row = db.execute(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'batches'::regclass"
        ).fetchone()
    return 0 if row is None else int(row[0])


def tidy_queue(pool: ConnectionPool, dead_rows: int | None = None) -> bool:
    """Vacuum ``batches`` when it holds at least ``dead_rows`` dead rows (None:
    `QUEUE_DEAD_ROWS`); whether it did so or found another host doing so (``SKIP_LOCKED``:
    this host never waits for that one). False too when the server skipped it because this
    role may not vacuum the table, which is logged as a warning (`warn_skipped`). Raises what
    the connection raises."""
    if dead_rows is None:
        dead_rows = QUEUE_DEAD_ROWS
    if queue_dead_rows(pool) < dead_rows:
        return False
    warnings: list[str] = []

    def keep_warning(notice: psycopg.errors.Diagnostic) -> None:
        # Another host's vacuum holding the table is a skip too (SKIP_LOCKED), and fine.
        if notice.severity_nonlocalized == "WARNING" and notice.sqlstate != LOCK_NOT_AVAILABLE:
            warnings.append(notice.message_primary or "")

    with connection(pool) as db:
        db.conn.add_notice_handler(keep_warning)
        try:
            db.execute("VACUUM (SKIP_LOCKED, TRUNCATE false) batches")
        finally:
            db.conn.remove_notice_handler(keep_warning)
    if warnings:
        warn_skipped(warnings[0])
        return False
    log.debug("fleet: vacuumed the queue table (%d dead rows or more)", dead_rows)
    return True


def warn_skipped(reason: str) -> None:
    """Log that the server skipped the queue's vacuum (with its ``reason``), at most once
    every `SKIPPED_WARNING_EVERY_S`."""
    global _last_skipped_warning
    now = time.monotonic()
    if now - _last_skipped_warning < SKIPPED_WARNING_EVERY_S:
        return
    _last_skipped_warning = now
    log.warning(
        "fleet: the server skipped the queue table's vacuum (%s): only its owner, the "
        "database's owner or a superuser may vacuum it; until pacer runs as one of them, "
        "claims slow down between autovacuum's visits",
        reason,
    )
