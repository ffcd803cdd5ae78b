"""`PgJournal`: the job journal in a PostgreSQL database that a fleet of pacers shares.

The SQLite journal's methods with its semantics, from the same core (`JournalCore`,
`JournalQueries`) on a `PgDialect`; plus the fleet's queue (`FleetQueue`: claims, leases) and
this host's own connection (`HostConnection`: its name held, word of work heard). Every write
is one transaction, committed when the method returns.
"""

from __future__ import annotations

import logging
import math
import socket
from collections.abc import Callable, Collection, Iterable
from typing import ClassVar, Self

import psycopg
from psycopg_pool import ConnectionPool

from pacer.journal.fleet_backend import Claim, Lease
from pacer.journal.on_core import CoreJournal
from pacer.journal.records import JobRecord, PartitionResult
from pacer.pgjournal.database import LEASE_S, POOL_SIZE, TIMEOUT_S, open_pool
from pacer.pgjournal.dialect import PgDialect
from pacer.pgjournal.host_connection import HostConnection
from pacer.pgjournal.leases import FleetQueue
from pacer.pgjournal.packs import PACK_JOBS, pack_jobs
from pacer.pgjournal.results import commit_results, settle_jobs
from pacer.pgjournal.schema import migrate
from pacer.pgjournal.tidy import tidy_queue

log = logging.getLogger(__name__)


class PgJournal(CoreJournal):
    """The job journal in PostgreSQL, shared by the hosts of a fleet: open one per host with
    `connect`, which migrates the schema. ``pool`` is its `open_pool`; ``clock`` gives
    wall-clock seconds for the jobs' times (None: the database's ``now()``, one clock for the
    whole fleet); ``host`` is this pacer's name in the fleet (whose estimates, whose leases);
    ``lease_s`` is how long a claim or a renewal holds partitions, on the database's clock.
    Safe to use from several threads: each call takes a connection of its own. Each method's
    contract is in `JournalBackend` and `FleetBackend`.

    >>> with PgJournal.connect("postgresql://pacer@db/pacer", host="gpu-1") as journal:
    ...     job = journal.add_job(4, "sha-chain", {"depth": 20})
    ...     claims = journal.claim("gpu-1", 64)
    """

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
        super().__init__(PgDialect(pool, clock, host))
        self._queue = FleetQueue(pool, self.lease_s)
        self._host_connection: HostConnection | None = None
        self.refused_results = 0  # results not stored: their leases were no longer this host's

    @classmethod
    def connect(
        cls, url: str, clock: Callable[[], float] | None = None, *, host: str | None = None,
        lease_s: float = LEASE_S, pool_size: int = POOL_SIZE, timeout_s: float = TIMEOUT_S,
    ) -> PgJournal:  # fmt: skip
        """Open a pool on the database at ``url`` and bring its schema to this version (hosts
        starting at once take turns); see `open_pool` for the rest."""
        pool = open_pool(url, pool_size, timeout_s)
        try:
            with pool.connection() as conn:
                migrate(conn)
            return cls(pool, clock, host, lease_s)
        except BaseException:
            pool.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- results ------------------------------------------------------------------------------
    def complete_partitions(self, items: Iterable[PartitionResult]) -> list[JobRecord]:
        """Journal proved partitions in one round trip (`commit_results`); the jobs this
        completed. A result proved under a lease (``lease``) is stored only while this host
        still holds that lease with its token; those refused are counted in
        ``refused_results``. Otherwise as `JournalBackend.complete_partitions`."""
        results = list(items)
        if not results:
            return []
        now = None if self._clock is None else self._clock()
        completed, refused = commit_results(self._pool, self.host, results, now)
        self.refused_results += refused
        return completed

    def settle(self) -> list[JobRecord]:
        """Complete the jobs whose results are all stored but still show as queued or running
        (`settle_jobs`); the jobs this completed. Every host's upkeep runs it."""
        return settle_jobs(self._pool, None if self._clock is None else self._clock())

    def pack(self, wanted: int = PACK_JOBS) -> int:
        """Pack the partition rows of up to ``wanted`` completed jobs into one row each
        (`pack_jobs`); how many jobs were packed. What the journal answers does not change."""
        return pack_jobs(self._pool, wanted)

    # -- the fleet's queue --------------------------------------------------------------------
    def claim(self, host: str, n: int) -> list[Claim]:
        """Lease up to ``n`` pending partitions to ``host``, in the fleet's order."""
        return self._queue.claim(host, n)

    def renew(self, host: str, tokens: Collection[int]) -> list[int]:
        """Extend the leases of ``host`` with these fencing ``tokens``; the tokens of those it
        still holds (`FleetQueue.renew`). Then vacuum the queue if it needs it (`tidy_queue`):
        a failure there is logged, and the renewal stands."""
        kept = self._queue.renew(host, tokens)
        try:
            tidy_queue(self._pool)
        except psycopg.Error as exc:
            log.warning("fleet: the queue table was not vacuumed: %s", exc)
        return kept

    def release(self, host: str, keep: Collection[int] = ()) -> int:
        """Give back every lease ``host`` holds but those whose fencing tokens are ``keep``;
        how many partitions they cover."""
        return self._queue.release(host, keep)

    def leases(self, job_id: str | None = None) -> list[Lease]:
        """The leases held, of one job or all, by job then index."""
        return self._queue.leases(job_id)

    def pending_partitions(self) -> int:
        """Partitions of queued and running jobs without a result, fleet-wide."""
        return self._queue.pending_partitions()

    # -- the host and the server --------------------------------------------------------------
    def hold_host(self) -> None:
        """Take this host's name (``host``) on a connection of its own, held until `close`:
        a second pacer of the same name is refused (`HostInUseError`, naming the holder)."""
        conninfo = self._pool.conninfo
        conninfo = conninfo if isinstance(conninfo, str) else conninfo()
        connection = HostConnection(conninfo, self.host, self._pool.timeout)
        connection.open()
        self._host_connection = connection

    def wait_for_work(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for word that partitions may be free to claim (a job
        accepted or leases given back, by any host); whether word came. A lost connection is
        opened again, the host's name taken back (`HostInUseError` if another pacer took it);
        ``OperationalError`` while the server cannot be reached. After `hold_host` only."""
        if self._host_connection is None:
            raise RuntimeError("wait_for_work needs the host's name: call hold_host() first")
        return self._host_connection.wait(timeout_s)

    def check_file(self) -> None:
        """Nothing to check: the journal is a server's, not a file this host could lose."""

    def probe(self) -> None:
        """Commit a write that changes nothing: raises as any write would now (the server
        down, read-only, out of disk, too slow for the statement timeout)."""
        with self._pool.connection() as conn:
            conn.execute("UPDATE pacer_schema SET version = version")

    def close(self) -> None:
        """Let the host's name go and close the pool; later calls raise
        ``psycopg_pool.PoolClosed``. Idempotent."""
        if self._host_connection is not None:
            self._host_connection.close()
        self._pool.close()
