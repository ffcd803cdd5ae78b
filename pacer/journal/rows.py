"""The rows both journals keep, column by column, and the records made from them: jobs, a page
of partitions, a page of jobs, and the saved estimates as JSON with their key."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pacer.journal.checks import check_limit
from pacer.journal.records import (
    Attempt,
    JobKey,
    JobRecord,
    JobState,
    PartitionRecord,
    PartitionState,
    check_duration,
)

JOB_COLUMNS = (
    "id, state, partitions, partitions_done, workload, params, priority, created_at, updated_at,"
    " error, result_digest"
)
PARTITION_COLUMNS = "idx, state, synthesis_s, gpu_s, phases, digest, error, gpu, completed_at"
ATTEMPT_COLUMNS = "idx, attempt, reason, gpu, at"

_ESTIMATES_KEY = "key"  # beside the estimates in their JSON: what they are valid for


def job_from_row(row: Sequence[Any]) -> JobRecord:
    """A job from a row of JOB_COLUMNS."""
    id_, state, partitions, done, workload, params, priority, created, updated, error, digest = row
    return JobRecord(
        id_, JobState(state), partitions, done, workload, json.loads(params), priority,
        created, updated, error, digest,
    )  # fmt: skip


def page_from_rows(
    job: JobRecord, offset: int, end: int, rows: Iterable[Sequence[Any]],
    attempts: Iterable[Sequence[Any]],
) -> list[PartitionRecord]:  # fmt: skip
    """The job's partitions ``offset`` to ``end - 1``, from the ``rows`` of PARTITION_COLUMNS
    that a journal holds for them and their ``attempts`` (rows of ATTEMPT_COLUMNS, by index
    then attempt): the partitions without a row are pending."""
    tried: dict[int, list[Attempt]] = {}
    for row in attempts:
        tried.setdefault(row[0], []).append(Attempt(*row))
    stored = {
        idx: PartitionRecord(job.id, idx, PartitionState(state), synthesis_s, gpu_s,
                             json.loads(phases), digest, error, gpu, completed_at,
                             tried.get(idx, []))
        for idx, state, synthesis_s, gpu_s, phases, digest, error, gpu, completed_at in rows
    }  # fmt: skip
    pending = PartitionState.PENDING
    return [
        stored.get(i) or PartitionRecord(job.id, i, pending, attempts=tried.get(i, []))
        for i in range(offset, end)
    ]


def jobs_page_statement(
    state: JobState | None, limit: int, after: JobKey | None
) -> tuple[str, tuple[object, ...]]:
    """The query of a page of jobs and its arguments: JOB_COLUMNS and the row's ``seq``.

    Keyset, not offset: newest first by (created_at, seq), from the key after ``after``. Jobs
    accepted meanwhile sort before the first page, so they never shift a later one, and
    pruned ones leave no hole to skip across.
    """
    check_limit("limit", limit)
    where: list[str] = []
    args: list[object] = []
    if state is not None:
        where.append("state = ?")
        args.append(state)
    if after is not None:
        where.append("(created_at, seq) < (?, ?)")
        args += after
    condition = f"WHERE {' AND '.join(where)} " if where else ""
    statement = (f"SELECT {JOB_COLUMNS}, seq FROM jobs {condition}"
                 "ORDER BY created_at DESC, seq DESC LIMIT ?")  # fmt: skip
    return statement, (*args, limit + 1)


def jobs_page_of(rows: list[Any], limit: int) -> tuple[list[JobRecord], JobKey | None]:
    """The page of jobs in ``rows`` (up to ``limit`` + 1 rows of `jobs_page_statement`) and
    the key of its last job, or None when no job follows it."""
    page = rows[:limit]
    last = (page[-1][7], page[-1][-1]) if len(rows) > limit else None  # created_at, seq
    return [job_from_row(row[:-1]) for row in page], last


def estimates_json(values: Mapping[str, float | None], key: str | None) -> str:
    """The estimates (seconds, or None if unknown) and their ``key`` as the JSON a journal
    keeps; ``ValueError`` for a name or a value that cannot be saved."""
    for name, value in values.items():
        if not isinstance(name, str) or name == _ESTIMATES_KEY:
            raise ValueError(f"estimate names must be strings other than {_ESTIMATES_KEY!r}, "
                             f"got {name!r}")  # fmt: skip
        if value is not None:
            check_duration(f"estimate {name!r}", value)
    if key is not None and not isinstance(key, str):
        raise ValueError(f"the estimates' key must be a string, got {key!r}")
    return json.dumps({**values, _ESTIMATES_KEY: key}, sort_keys=True)


def estimates_of(saved: str | None) -> dict[str, float | None] | None:
    """The estimates in what `estimates_json` wrote; None if nothing was saved."""
    if saved is None:
        return None
    values = dict(json.loads(saved))
    values.pop(_ESTIMATES_KEY, None)
    return {k: None if v is None else float(v) for k, v in values.items()}


def estimates_key_of(saved: str | None) -> str | None:
    """The key in what `estimates_json` wrote; None if none was (or nothing was saved)."""
    key = None if saved is None else json.loads(saved).get(_ESTIMATES_KEY)
    return key if isinstance(key, str) else None
