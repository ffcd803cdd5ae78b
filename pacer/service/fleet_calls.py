"""The calls a host of a fleet makes to the journal on its claims thread, each a plain function
of the journal: a claim, timed; the claimed jobs read (and marked running at their first
claim)."""

from __future__ import annotations

import time
from collections.abc import Callable

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
