"""The calls a host of a fleet makes to the journal on its claims thread, each a plain function
of the journal: a claim, timed; the claimed jobs read (and marked running at their first
claim); and the leases of a claim whose answer was lost, given back."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from pacer.journal import Claim, FleetBackend, JobRecord, JobState


def timed_claim(journal: FleetBackend, n: int, seconds: Callable[[float], None]) -> list[Claim]:
    """Claim up to ``n`` partitions for ``journal.host``; ``seconds(s)`` observes how long the
    round trip took."""
    started = time.perf_counter()
    claims = journal.claim(journal.host, n)
    seconds(time.perf_counter() - started)
    return claims


def running_jobs(journal: FleetBackend, job_ids: list[str]) -> dict[str, JobRecord]:
    """The jobs of ``job_ids`` that are still queued or running, by id, each marked running
    if it was queued (its first claim)."""
    found = {}
    for job_id in job_ids:
        job = journal.get_job(job_id)
        if job is not None and job.state is JobState.QUEUED:
            job = journal.mark_running(job_id)
        if job is not None and job.state is JobState.RUNNING:
            found[job_id] = job
    return found


def give_back_unknown(journal: FleetBackend, known: Collection[int]) -> int:
    """Give back the leases of ``journal.host`` whose fencing tokens are not ``known`` (those
    the host holds): leased by a claim whose answer was lost, so no one here would prove
    them, and the fleet would wait a lease for them. How many partitions they cover.

    Only while no claim of the host is in flight: one that is would be given back too."""
    return journal.release(journal.host, keep=known)
