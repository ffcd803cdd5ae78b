"""The fleet's queue: hosts claim partitions of the shared journal's jobs, hold them under a
lease they renew, and give back what they did not start.

A job's partitions are index runs in ``batches``, never a row per partition: at submit, its
lanes (up to `LANES` free runs); a claim takes the heads of the free runs in the fleet's order
(higher priority, then older job; within a job, runs given back first, then its lanes, each
from its lowest index), leasing each to the host (``claimed_by``, ``lease_until`` on the
database's clock) and leaving the rest of a run free. ``FOR UPDATE SKIP
LOCKED`` lets claimers pass the runs another claim holds: with a job's lanes, concurrent
claimers take different runs of it instead of queueing on one row.

A lease that expires is any host's to claim: the claim hands out only the partitions of the
run that have no result yet, under a new fencing token: a result proved under the old one is
refused (`pacer.pgjournal.results`). Results are stored once (``complete_partitions`` ignores a
partition already journaled) and a run whose partitions all have results is deleted.
A job that ends (completed, failed, cancelled) has its runs deleted: nothing of it is claimed
again. The journal's writes keep the runs in step with the jobs through `add_runs` and
`drop_runs`, in their transactions, and ``pacer_commit`` deletes the runs it finishes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from itertools import pairwise

from psycopg_pool import ConnectionPool

from pacer.journal.fleet_backend import Claim, Lease
from pacer.journal.records import ACTIVE, JobRecord, is_int
from pacer.pgjournal.database import PgConnection, connection
from pacer.pgjournal.schema import LANE_PARTITIONS, LANES
from pacer.ranges import IndexRanges

MAX_CLAIM = 10_000  # partitions one claim may ask for
# What hosts LISTEN on: a job accepted, or leases given back (partitions free to claim now).
WORK_CHANNEL = "pacer_work"

_ACTIVE_JOB = "EXISTS (SELECT 1 FROM jobs j WHERE j.id = b.job_id AND j.state IN (?, ?))"
# Before a statement on a host's leases: drop those of jobs that ended (a lease taken as its
# job ended outlives the job's deletion of its runs). Parameters: the host, ACTIVE.
_DROP_ENDED = f"WITH ended AS (DELETE FROM batches b WHERE b.claimed_by = ? AND NOT {_ACTIVE_JOB})"


def lanes(partitions: int) -> list[tuple[int, int]]:
    """A new job's unclaimed runs: up to `LANES`, each of `LANE_PARTITIONS` or more.

    >>> lanes(10), len(lanes(1_000_000))
    ([(0, 10)], 16)
    """
    count = max(1, min(LANES, partitions // LANE_PARTITIONS))
    bounds = [partitions * i // count for i in range(count + 1)]
    return list(pairwise(bounds))


def free_runs(start: int, stop: int, taken: Iterable[tuple[int, int]]) -> IndexRanges:
    """The indices of ``[start, stop)`` outside the ascending, disjoint runs ``taken``.

    >>> free_runs(0, 10, [(0, 1), (3, 5)]).runs()
    [(1, 3), (5, 10)]
    """
    gaps: list[tuple[int, int]] = []
    at = start
    for first, end in taken:
        if first > at:
            gaps.append((at, min(first, stop)))
        at = max(at, end)
        if at >= stop:
            break
    if at < stop:
        gaps.append((at, stop))
    return IndexRanges(gaps)


def add_runs(db: PgConnection, job: JobRecord) -> None:
    """In the open transaction: the new ``job``'s lanes, free for any claim, and word of work
    to the hosts (delivered when the transaction commits)."""
    starts, stops = zip(*lanes(job.partitions), strict=True)
    db.execute(
        "INSERT INTO batches (job_id, priority, created_at, seq, first, start, stop)"
        " SELECT j.id, j.priority, j.created_at, j.seq, l.start, l.start, l.stop"
        " FROM jobs j, unnest(?::integer[], ?::integer[]) AS l (start, stop) WHERE j.id = ?",
        (list(starts), list(stops), job.id),
    )
    db.execute(f"NOTIFY {WORK_CHANNEL}")


def drop_runs(db: PgConnection, job_id: str) -> None:
    """In the open transaction: the job ended; delete its runs, so no host claims it again."""
    db.execute("DELETE FROM batches WHERE job_id = ?", (job_id,))


class FleetQueue:
    """Claims, leases and their release on ``pool``: what a host of a fleet asks of the shared
    journal. A claim or a renewal holds partitions for ``lease_s`` seconds."""

    def __init__(self, pool: ConnectionPool, lease_s: float) -> None:
        self._pool = pool
        self.lease_s = lease_s

    def claim(self, host: str, n: int) -> list[Claim]:
        """Lease up to ``n`` pending partitions to ``host`` in the fleet's order, from the
        free runs and the runs whose lease expired; one round trip. Fewer, or none, when no
        more are free now (or the others are held by concurrent claims for the instant their
        transactions take)."""
        _check_host(host)
        if not is_int(n) or not 1 <= n <= MAX_CLAIM:
            raise ValueError(f"a claim takes from 1 to {MAX_CLAIM} partitions, got {n!r}")
        with connection(self._pool) as db:
            rows = db.execute(
                "SELECT * FROM pacer_claim(?, ?, ?)", (host, n, self.lease_s)
            ).fetchall()
        return [
            Claim(batch, job_id, free_runs(start, stop, ((d, d + 1) for d in done)), previous,
                  token)
            for batch, job_id, start, stop, done, previous, token in rows
        ]  # fmt: skip

    def renew(self, host: str, tokens: Collection[int]) -> list[int]:
        """Extend by ``lease_s`` from now those of ``host``'s leases whose fencing tokens are
        ``tokens`` (the leases it knows it holds); the tokens of those it still holds. A lease
        not among them was reclaimed after it expired, or had all its results, or its job
        ended (those leases are dropped here). A lease of ``host`` not named is not renewed:
        a host that lost track of a lease lets it lapse for the fleet to take."""
        _check_host(host)
        with connection(self._pool) as db:
            # The fleet reached the server: the clock of its leases' grace (pacer_back).
            db.execute("SELECT pacer_back(?)", (self.lease_s,))
            rows = db.execute(
                f"{_DROP_ENDED} UPDATE batches b"
                " SET lease_until = now() + make_interval(secs => ?), renewed_at = now()"
                f" WHERE b.claimed_by = ? AND b.token = ANY(?::bigint[]) AND {_ACTIVE_JOB}"
                " RETURNING b.token",
                (host, *ACTIVE, self.lease_s, host, sorted(tokens), *ACTIVE),
            ).fetchall()
        return sorted(token for (token,) in rows)

    def release(self, host: str, keep: Collection[int] = ()) -> int:
        """Give back every lease ``host`` holds but those whose fencing tokens are ``keep``,
        at once free for any claim (a clean drain: what it proved is committed, the rest it
        did not start; or leases the host does not know it holds); how many partitions they
        cover. Leases of jobs that ended are dropped instead."""
        _check_host(host)
        with connection(self._pool) as db:
            rows = db.execute(
                f"{_DROP_ENDED} UPDATE batches b SET claimed_by = NULL, lease_until = NULL,"
                " given_back = true, first = start WHERE b.claimed_by = ?"
                f" AND NOT b.token = ANY(?::bigint[]) AND {_ACTIVE_JOB} RETURNING stop - start",
                (host, *ACTIVE, host, sorted(keep), *ACTIVE),
            ).fetchall()
            if rows:
                db.execute(f"NOTIFY {WORK_CHANNEL}")
        return sum(count for (count,) in rows)

    def leases(self, job_id: str | None = None) -> list[Lease]:
        """The leases held (expired ones included, until reclaimed), of one job or all, by
        job then index: which hosts hold which partitions."""
        query = (
            "SELECT id, job_id, claimed_by, start, stop,"
            " extract(epoch FROM lease_until - now())::double precision FROM batches"
            " WHERE claimed_by IS NOT NULL"
        )
        with connection(self._pool) as db:
            if job_id is None:
                rows = db.execute(query + " ORDER BY job_id, start").fetchall()
            else:
                rows = db.execute(query + " AND job_id = ? ORDER BY start", (job_id,)).fetchall()
            return [Lease(*row) for row in rows]

    def pending_partitions(self) -> int:
        """Partitions of queued and running jobs without a result, fleet-wide: what the
        fleet has left to prove, whoever holds it."""
        with connection(self._pool) as db:
            row = db.execute(
                "SELECT coalesce(sum(partitions - partitions_done), 0) FROM jobs"
                " WHERE state IN (?, ?)",
                ACTIVE,
            ).fetchone()
        return 0 if row is None else int(row[0])


def _check_host(host: str) -> None:
    if not isinstance(host, str) or not host:
        raise ValueError(f"host must be a non-empty name, got {host!r}")
