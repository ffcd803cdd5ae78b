"""The leases a host of a fleet holds, as it knows them: each lease's job, partitions, fencing
token and deadline; and the gate a GPU passes before it proves a partition.

A lease's deadline is on this host's monotonic clock: the moment its claim or last renewal was
sent, plus the lease. The database set the lease's end later than that (on its own clock), so
the deadline never runs past it. Past its deadline (the host was frozen, or could not reach the
database to renew), a lease's partitions are not given to a GPU: they are set aside, and the
next renewal either puts them back in the backlog (the lease was still this host's) or drops
them (it was lost).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass

from pacer.ranges import IndexRanges


@dataclass
class Held:
    """A lease this host holds: its job, the partitions it was claimed with, its fencing token,
    and its deadline (s, on the host's monotonic clock)."""

    job_id: str
    pending: IndexRanges
    token: int = 0
    deadline: float = float("inf")


class HeldLeases:
    """The leases held, by batch (``held``), on ``clock`` (monotonic seconds). The event loop
    changes them; the GPU workers' threads ask `gate` (under a lock)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.held: dict[int, Held] = {}
        self._set_aside: dict[str, IndexRanges] = {}  # job → partitions a gate refused

    def hold(self, batch: int, lease: Held) -> None:
        """A lease claimed."""
        with self._lock:
            self.held[batch] = lease

    def drop(self, batch: int) -> Held:
        """A lease lost (or given back): no longer held; what it was."""
        with self._lock:
            return self.held.pop(batch)

    def clear(self) -> None:
        with self._lock:
            self.held.clear()
            self._set_aside.clear()

    def renewed(self, kept: Collection[int], deadline: float) -> None:
        """The leases whose fencing tokens are ``kept`` were renewed: their deadline is now
        ``deadline``."""
        with self._lock:
            for lease in self.held.values():
                if lease.token in kept:
                    lease.deadline = deadline

    def gate(self, job_id: str, index: int) -> tuple[int, int] | None:
        """On a GPU worker's thread, before it proves partition ``index`` of ``job_id``: the
        lease (batch, token) it is proved under; None if no lease held covers it, or the one
        that does is past its deadline (the partition is then set aside, see `set_aside`)."""
        now = self._clock()
        with self._lock:
            return self._covering(job_id, index, now)

    def lease_of(self, job_id: str, index: int) -> tuple[int, int] | None:
        """The lease (batch, token) this host holds over partition ``index`` of ``job_id``,
        whatever its deadline (the database judges whether it still holds); None if none does.
        A result proved under an older lease of this host is committed under this one."""
        with self._lock:
            return self._covering(job_id, index, float("-inf"))

    def _covering(self, job_id: str, index: int, now: float) -> tuple[int, int] | None:
        """The newest lease (highest token) over the partition whose deadline is after
        ``now``. (A lease the host claimed again under a new token may sit beside the one
        it lost until the next renewal drops that.)"""
        covering = [
            (lease.token, batch)
            for batch, lease in self.held.items()
            if lease.job_id == job_id and index in lease.pending and now < lease.deadline
        ]
        if not covering:
            return None
        token, batch = max(covering)
        return batch, token

    def set_aside(self, job_id: str, index: int) -> None:
        """A partition the gate refused: kept until the next renewal says whose it is."""
        self._set_aside.setdefault(job_id, IndexRanges()).add(index)

    def take_back(self) -> tuple[dict[str, IndexRanges], int]:
        """After a renewal: the partitions set aside that a lease held still covers (by job,
        to queue again), and how many others were dropped (their leases were lost)."""
        back: dict[str, IndexRanges] = {}
        dropped = 0
        with self._lock:
            aside, self._set_aside = self._set_aside, {}
            for job_id, indices in aside.items():
                for index in indices:
                    if any(
                        lease.job_id == job_id and index in lease.pending
                        for lease in self.held.values()
                    ):
                        back.setdefault(job_id, IndexRanges()).add(index)
                    else:
                        dropped += 1
        return back, dropped

    def partitions(self) -> int:
        """Partitions of the leases held, as claimed."""
        return sum(len(lease.pending) for lease in self.held.values())
