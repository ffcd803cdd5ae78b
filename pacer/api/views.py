"""The JSON the API answers with, built from the service's state and the journal's records.

Times are epoch seconds (``created_at``) with the same instant beside them as ISO 8601 in UTC
(``created_at_iso``: ``2026-01-01T00:00:00.000Z``). Lists come in pages: ``next_cursor`` is
where the next one starts (null after the last). Pages are built on the journal's thread, and
never hold a whole job of a million partitions.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pacer.api.inputs import encode_cursor
from pacer.control.controller import PIController
from pacer.journal import (
    Attempt,
    JobKey,
    JobRecord,
    JobState,
    Lease,
    PartitionRecord,
    PartitionSummary,
    UnknownJob,
)
from pacer.workload import Pool

if TYPE_CHECKING:
    from pacer.service.lifecycle import Service

LAST_FAILURES = 5  # failed attempts a job's detail lists, newest first
JOBS_CURSOR = ("jobs", (float, int))  # a job's list key: created_at, sequence
PARTITIONS_CURSOR = ("partitions", (int,))  # the next partition's index


def iso(seconds: float | None) -> str | None:
    """Epoch seconds as ISO 8601 in UTC, to the millisecond.

    >>> iso(1767225600.25)
    '2026-01-01T00:00:00.250Z'
    """
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _with_iso(out: dict[str, Any], *names: str) -> dict[str, Any]:
    for name in names:
        out[f"{name}_iso"] = iso(out[name])
    return out


def job_json(job: JobRecord) -> dict[str, Any]:
    out = asdict(job)
    out["state"] = job.state.value
    return _with_iso(out, "created_at", "updated_at")


def attempt_json(attempt: Attempt) -> dict[str, Any]:
    return _with_iso(asdict(attempt), "at")


def partition_json(record: PartitionRecord) -> dict[str, Any]:
    out = asdict(record)
    del out["job_id"]
    out["state"] = record.state.value
    out["attempts"] = [attempt_json(a) for a in record.attempts]
    return _with_iso(out, "completed_at")


def summary_json(summary: PartitionSummary) -> dict[str, Any]:
    return {
        "pending": summary.pending,
        "completed": summary.completed,
        "failed": summary.failed,
        "first_failures": [{"index": i, "error": e} for i, e in summary.first_failures],
    }


def pool_json(pool: Pool | None) -> dict[str, Any]:
    if pool is None:
        return {"total_bytes": 0, "in_use_bytes": 0}
    return {
        "backend": pool.backend,
        "total_bytes": pool.total_bytes,
        "in_use_bytes": pool.in_use_bytes,
        "slots_total": pool.slots_total,
        "slots_free": pool.slots_free,
        "checkouts": pool.checkouts,
        "waits": pool.waits,
        "fallbacks": pool.fallbacks,
        "allocations_after_warmup": pool.allocations_after_warmup,
        # Where the slots came from: kept by the previous pacer on this host, or allocated.
        "origin": {
            "adopted": pool.slots_adopted,
            "allocated": pool.slots_total - pool.slots_adopted,
        },
    }


def _partitions_cursor(job: JobRecord, end: int) -> str | None:
    return encode_cursor(PARTITIONS_CURSOR[0], end) if end < job.partitions else None


async def jobs_page(
    service: Service, state: JobState | None, limit: int, after: JobKey | None
) -> dict[str, Any]:
    """Up to ``limit`` jobs, newest first, from the one after ``after``."""

    def build() -> dict[str, Any]:
        jobs, last = service.journal.jobs_page(state, limit, after)
        return {
            "jobs": [job_json(j) for j in jobs],
            "next_cursor": None if last is None else encode_cursor(JOBS_CURSOR[0], *last),
        }

    return await service.db(build)


def holders_json(leases: list[Lease]) -> list[dict[str, Any]]:
    """Leases grouped by the host holding them, by host name: how many, their partitions
    (runs ``[start, stop)``, some of them maybe proved already) and the soonest expiry (s on
    the database's clock; ≤ 0: lapsed, any host's to reclaim)."""
    hosts: dict[str, dict[str, Any]] = {}
    for lease in leases:
        held = hosts.setdefault(
            lease.host,
            {
                "host": lease.host,
                "leases": 0,
                "partitions": 0,
                "runs": [],
                "expires_in_s": lease.expires_in_s,
            },
        )
        held["leases"] += 1
        held["partitions"] += lease.stop - lease.start
        held["runs"].append([lease.start, lease.stop])
        held["expires_in_s"] = round(min(held["expires_in_s"], lease.expires_in_s), 3)
    return [hosts[host] for host in sorted(hosts)]


async def job_detail(service: Service, job_id: str, page: int) -> dict[str, Any] | None:
    """The job, counts of its partitions by state with its first failures, and its first
    ``page`` partitions (``partitions_next_offset`` and ``partitions_next_cursor``: where the
    next page starts, or None); with a fleet's journal, which hosts hold its partitions
    (``holders``). None if there is no such job."""
    fleet = service.fleet is not None

    def build() -> dict[str, Any] | None:
        journal = service.journal
        job = journal.get_job(job_id)
        if job is None:
            return None
        summary = journal.partition_summary(job_id)
        records = journal.partition_page(job_id, 0, page)
        detail = {
            **job_json(job),
            "partitions_summary": summary_json(summary),
            "last_failures": [attempt_json(a) for a in journal.failures(job_id, LAST_FAILURES)],
            "partition_results": [partition_json(p) for p in records],
            "partitions_next_offset": page if job.partitions > page else None,
            "partitions_next_cursor": _partitions_cursor(job, page),
        }
        if fleet:
            detail["holders"] = holders_json(service.journal_access.fleet_journal.leases(job_id))
        return detail

    try:
        return await service.db(build)
    except UnknownJob:  # pruned between two reads
        return None


async def partition_page(
    service: Service, job_id: str, offset: int, limit: int
) -> dict[str, Any] | None:
    """Partitions ``offset`` to ``offset + limit - 1`` of a job, pending ones included, with
    ``next_offset`` and ``next_cursor`` (None after the last); None if there is no such job."""

    def build() -> dict[str, Any] | None:
        job = service.journal.get_job(job_id)
        if job is None:
            return None
        records = service.journal.partition_page(job_id, offset, limit)
        end = offset + limit
        return {
            "id": job_id,
            "partitions": job.partitions,
            "offset": offset,
            "limit": limit,
            "next_offset": end if end < job.partitions else None,
            "next_cursor": _partitions_cursor(job, end),
            "partition_results": [partition_json(p) for p in records],
        }

    try:
        return await service.db(build)
    except UnknownJob:
        return None


def controller_state(service: Service) -> dict[str, Any]:
    """The dispatch policy: its name, mode, interval (s) and bootstrap counters; under pi
    also the controller's settings, terms, estimates, what synthesis can supply
    (partitions/s), the queue it keeps in front of the synthesis processes (partitions) and
    the measured hand-off (s)."""
    policy = service.policy
    state: dict[str, Any] = {
        "policy": service.policy_name,
        "mode": policy.mode.value,
        "interval_s": policy.interval_s(),
        "bootstraps": policy.bootstraps,
        "rebootstraps": policy.rebootstraps,
    }
    if isinstance(policy, PIController):
        state["settings"] = policy.settings.model_dump()
        state["terms"] = policy.terms._asdict()
        state["estimates"] = asdict(policy.estimates)
        supply = policy.synthesis_supply_per_s
        state["synthesis_supply_per_s"] = supply if supply > 0 else None
        state["synthesis_queue"] = policy.synthesis_queue()
        state["synthesis_handoff_s"] = policy.synthesis_handoff_s
    return state


def fleet_status(service: Service) -> dict[str, Any] | None:
    """This host's part in its fleet (None without one): its name, lease, claims and leases."""
    fleet = service.fleet
    if fleet is None:
        return None
    return {
        "host": fleet.host,
        "lease_s": fleet.lease_s,
        "claim_max": service.settings.journal.claim_max,
        "claim_target": fleet.target(),
        "leases": len(fleet.held),
        "leased_partitions": fleet.leased_partitions(),
        "since_renewal_s": round(fleet.since_renewal_s(), 3),
        **asdict(fleet.counts),
    }


def _fleet_wide(service: Service) -> dict[str, Any]:
    """On the journal's thread: the fleet's partitions left to prove and every host holding
    leases."""
    journal = service.journal_access.fleet_journal
    return {
        "pending_partitions": journal.pending_partitions(),
        "hosts": [{k: v for k, v in held.items() if k != "runs"}
                  for held in holders_json(journal.leases())],
    }  # fmt: skip


async def status(service: Service) -> dict[str, Any]:
    """Readiness and its reasons, health, the controller, queues, memory, the pool (where its
    slots came from), how long each start-up phase took, calls, retries, synthesis, GPUs, job
    counts and the journal's health (with the calls running on its threads); with a fleet's
    journal, the fleet (``fleet``: this host's claims and leases, the hosts holding leases).
    While a journal call hangs, what only the journal knows (the job counts, the fleet's
    partitions left and hosts) is null rather than waited for."""
    p = service.pipeline
    fleet = fleet_status(service)

    def counts_read() -> tuple[dict[JobState, int], dict[str, Any]]:
        return service.journal.counts(), {} if fleet is None else _fleet_wide(service)

    access = service.journal_access
    counts, fleet_wide = await access.read_unless_stalled(counts_read) or (
        None, {"pending_partitions": None, "hosts": None}
    )  # fmt: skip
    reasons = service.unready_reasons()
    health = service.health
    answer = {
        "ready": not reasons,
        "draining": service.draining,
        "reasons": reasons,
        "health": {
            "since_progress_s": round(service.watchdog.since_progress_s(), 3),
            "stalled_s": round(service.watchdog.stalled_s(), 3),
            "stall_s": service.watchdog.stall_s,
            "task_failures": service.supervisor.failures(),
        },
        "workload": service.workload.name,
        "plan": service.plan.as_dict(),
        "controller": controller_state(service),
        "queues": {
            "backlog": p.backlog,
            "synthesizing": p.synthesizing,
            "ready": p.ready,
            "proving": p.gpu_busy,
            "verifying": p.verifying,
        },
        "memory": {
            "budget_bytes": p.budget_bytes,  # in effect: clamped to the host's at start
            **service.plan.memory.as_dict(),
            "inflight_bytes": p.inflight_bytes,
            "partition_bytes": service.plan.partition_bytes,
            "caps": asdict(service.plan.caps),
        },
        "pool": pool_json(p.pool),
        "startup": service.startup.as_json(),
        "calls": {
            # What a call may take now (s), and what became of those that took longer.
            "limits_s": p.limits.limits(),
            "hung": dict(p.hung_calls),
            "abandoned_threads": p.abandoned_threads,
            # Verifications due but skipped while the verify threads were behind (D201).
            "verifications_skipped": p.verifications_skipped,
            "abandoned_bytes": p.abandoned_bytes,
            "live_workers": p.live_workers,
        },
        "retry": {**service.settings.retry.model_dump(), "waiting": service.jobs.retries_waiting},
        "synthesis": {
            # Where synthesis runs: the GPU path's setting; the CPU workloads use threads.
            "executor": service.plan.executor,
            # How the ntt workload computes it (numba or numpy); None for other workloads.
            "kernel": service.plan.kernel,
            "restarts": p.synthesis_restarts,
            # The synthesis workers' share of the last minute in a synthesis, and their time.
            "busy_ratio": round(p.calls.synthesis_busy_ratio(), 4),
            "busy_seconds": round(p.calls.synthesis_busy_seconds(), 3),
        },
        "gpus": [
            {
                "gpu": g,
                "workers": p.workers_on(g),
                "busy_ratio": round(p.busy_ratio(g), 4),
                "busy_seconds": round(p.busy_seconds(g), 3),
                "idle_s": None if (idle := p.idle_s(g)) is None else round(idle, 3),
            }
            for g in p.gpus
        ],
        "jobs": None if counts is None else {state.value: n for state, n in counts.items()},
        "journal": {
            "healthy": health.healthy,
            "failing_s": round(health.failing_s(), 3),
            "error": health.error,
            "uncommitted_results": service.uncommitted(),
            "dispatch_held": service.commits.dispatch_held,
            "stall_s": access.settings.stall_s,
            "calls": [
                {"call": call.name, "thread": call.thread, "running_s": round(running_s, 3)}
                for call, running_s in access.calls.running()
            ],
        },
    }
    if fleet is not None:
        answer["fleet"] = {**fleet, **fleet_wide}
    return answer
