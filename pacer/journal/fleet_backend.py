"""The fleet's queue as the service uses it: `FleetBackend`, a journal that several pacers share
and claim partitions from (`pacer.pgjournal.PgJournal` is one), and what it answers: `Claim`,
`Lease`, `HostInUseError`. Nothing here needs a database driver."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from pacer.journal.interface import JournalBackend
from pacer.journal.records import JobRecord, JournalRefusedError
from pacer.ranges import IndexRanges


@dataclass(frozen=True)
class Claim:
    """Partitions of one job leased to a host: ``batch`` names the lease, ``pending`` the
    partitions to prove (its run less those that have a result), ``reclaimed_from`` the host
    whose lease had expired (None for partitions never handed out, or given back), ``token``
    the lease's fencing token: its results are stored only while the lease, with this token,
    is still this host's (`pacer.journal.records.LeaseToken`)."""

    batch: int
    job_id: str
    pending: IndexRanges
    reclaimed_from: str | None
    token: int = 0


@dataclass(frozen=True)
class Lease:
    """A run ``[start, stop)`` of a job's partitions that ``host`` holds (``batch``), for
    ``expires_in_s`` more seconds on the database's clock (≤ 0: expired, anyone's to claim).
    Some of its partitions may already have results."""

    batch: int
    job_id: str
    host: str
    start: int
    stop: int
    expires_in_s: float


class HostInUseError(JournalRefusedError):
    """Another pacer of the fleet runs under this host name: two would renew and give back
    each other's leases. ``holder`` says who holds the name, as far as the database knows."""

    def __init__(self, host: str, holder: str) -> None:
        super().__init__(
            f"host name {host!r} is in use in the fleet's journal by {holder}: stop that "
            "pacer, or give this one another name (PACER_JOURNAL__HOST)"
        )
        self.host = host
        self.holder = holder


class FleetBackend(JournalBackend, Protocol):
    """A journal a fleet shares: the `JournalBackend` calls, and the queue's. Its calls may be
    made from several threads at once (each takes a connection of its own), but for
    `wait_for_work`, which one thread calls at a time. ``host`` is this pacer's name in the
    fleet, ``lease_s`` how long a claim or a renewal holds partitions (s)."""

    host: str
    lease_s: float
    refused_results: int
    """Results not stored since the journal opened: their leases were no longer this host's."""

    def hold_host(self) -> None:
        """Take this host's name for as long as the journal is open (on a connection of its
        own); `HostInUseError` if another pacer holds it."""
        ...

    def wait_for_work(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for word that partitions may be free to claim (a job
        accepted, leases given back, by any host); whether word came. After a lost connection
        it connects again and takes the host's name back (`HostInUseError` if another pacer
        took it meanwhile); the journal's ``OperationalError`` while it cannot."""
        ...

    def claim(self, host: str, n: int) -> list[Claim]:
        """Lease up to ``n`` pending partitions to ``host``, in the fleet's order."""
        ...

    def renew(self, host: str, tokens: Collection[int]) -> list[int]:
        """Extend the leases of ``host`` with these fencing ``tokens`` (those it knows it
        holds; no other); the tokens of those it still holds."""
        ...

    def release(self, host: str, keep: Collection[int] = ()) -> int:
        """Give back every lease ``host`` holds but those whose fencing tokens are ``keep``;
        how many partitions they cover."""
        ...

    def leases(self, job_id: str | None = None) -> list[Lease]:
        """The leases held, of one job or all, by job then index."""
        ...

    def mark_running(self, job_id: str) -> JobRecord:
        """A queued job's first partitions were claimed: it is running."""
        ...

    def pending_partitions(self) -> int:
        """Partitions of queued and running jobs without a result, fleet-wide."""
        ...

    def settle(self) -> list[JobRecord]:
        """Complete the jobs that have every result stored but are still queued or running
        (their last commit lost its count); the jobs this completed. Idempotent, and safe on
        several hosts at once."""
        ...

    def pack(self, wanted: int = ...) -> int:
        """Fold the result rows of up to ``wanted`` completed jobs into a compact form, without
        changing what the journal answers for them; how many jobs were packed. Idempotent,
        and safe on several hosts at once."""
        ...
