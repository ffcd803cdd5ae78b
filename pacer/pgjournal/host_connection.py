"""This host's own connection to the fleet's database: it holds the host's name (a session
advisory lock, so a second pacer of the same name is refused) and listens for word of work.

A session lock lives as long as its connection: the server drops it when the host dies (its
connection closes), so a restart is never blocked by a stale lock. After a lost connection (the
server restarted) the name is taken again on the next connection, unless another pacer took it
meanwhile.
"""

from __future__ import annotations

import hashlib
import os
import socket

import psycopg
from psycopg.rows import TupleRow

from pacer.journal.fleet_backend import HostInUseError
from pacer.pgjournal.database import connect_options, session_settings
from pacer.pgjournal.leases import WORK_CHANNEL

# pg_try_advisory_lock(int, int)'s first key for host names ("pacr"); the two-key space does
# not overlap the one-key space of the migration lock.
HOST_LOCK = 0x70616372
APPLICATION_NAME_BYTES = 63  # PostgreSQL keeps this much of application_name


def name_key(host: str) -> int:
    """The lock's second key for ``host``: 31 bits of its SHA-256 (non-negative, as pg_locks
    shows it)."""
    return int.from_bytes(hashlib.sha256(host.encode()).digest()[:4], "big") & 0x7FFF_FFFF


class HostConnection:
    """A connection of its own to ``conninfo``, holding ``host``'s name and listening on
    `WORK_CHANNEL`. `open` takes the name (`HostInUseError` if another pacer has it); `wait`
    waits for word of work; `close` lets the name go. One thread uses it at a time."""

    def __init__(self, conninfo: str, host: str, timeout_s: float) -> None:
        self._conninfo = conninfo
        self.host = host
        self._timeout_s = timeout_s
        self._conn: psycopg.Connection[TupleRow] | None = None
        me = f"pacer {host} pid {os.getpid()} on {socket.gethostname()}"
        self.application_name = me.encode()[:APPLICATION_NAME_BYTES].decode(errors="ignore")

    def open(self) -> None:
        """Connect, take the host's name, listen. `HostInUseError` naming the holder if
        another pacer has the name; psycopg's ``OperationalError`` if the server cannot be
        reached."""
        self.close()
        conn = psycopg.connect(
            self._conninfo, autocommit=True, application_name=self.application_name,
            **connect_options(self._timeout_s),
        )  # fmt: skip
        try:
            conn.execute(session_settings(self._timeout_s))
            key = name_key(self.host)
            row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (HOST_LOCK, key)).fetchone()
            if row is None or not row[0]:
                raise HostInUseError(self.host, self._holder(conn, key))
            conn.execute(f"LISTEN {WORK_CHANNEL}")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def wait(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a notification on `WORK_CHANNEL`; whether one came.
        A connection that was lost is opened again first (the name taken back)."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            self.open()
            conn = self._conn
            assert conn is not None
        try:
            return any(True for _ in conn.notifies(timeout=timeout_s, stop_after=1))
        except psycopg.OperationalError:
            self.close()
            raise

    def close(self) -> None:
        """Close the connection: the name is free for another pacer. Idempotent."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    @staticmethod
    def _holder(conn: psycopg.Connection[TupleRow], key: int) -> str:
        """Who holds the name, as the server shows it (another role's sessions may be hidden).
        An advisory lock is a database's: another fleet's database on the server may have a
        host of the same name."""
        row = conn.execute(
            "SELECT a.application_name, a.client_addr::text FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory'"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND l.classid = %s AND l.objid = %s AND l.objsubid = 2 AND l.granted",
            (HOST_LOCK, key),
        ).fetchone()
        if row is None or not row[0]:
            return "another pacer"
        name, address = row
        return f"{name} (from {address or 'a local socket'})"
