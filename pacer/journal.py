"""The job journal: jobs and their partition results in an SQLite file, so a restart resumes.

Used from one thread (the event loop's). The file is in WAL mode with ``synchronous=FULL``: every
write method has committed, and fsynced, before it returns. Only partitions that finished have a
row; a partition without one is pending, so adding a job of a million partitions writes one row.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

SCHEMA_VERSION = 1
MAX_PARTITIONS = 1_000_000
BUSY_TIMEOUT_MS = 5_000
_ESTIMATES_KEY = "key"  # beside the estimates in their JSON: what they are valid for

_SCHEMA = f"""
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, state TEXT NOT NULL,
    partitions INTEGER NOT NULL, partitions_done INTEGER NOT NULL, workload TEXT,
    params TEXT NOT NULL, priority INTEGER NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, error TEXT, result_digest TEXT);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, created_at, seq);
CREATE INDEX IF NOT EXISTS jobs_by_age ON jobs (created_at, seq);
CREATE INDEX IF NOT EXISTS jobs_by_update ON jobs (state, updated_at);
CREATE TABLE IF NOT EXISTS partitions (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL, synthesis_s REAL,
    gpu_s REAL, phases TEXT NOT NULL, digest TEXT, error TEXT, gpu INTEGER,
    completed_at REAL NOT NULL, PRIMARY KEY (job_id, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS estimates (
    id INTEGER PRIMARY KEY CHECK (id = 1), estimates TEXT NOT NULL);
PRAGMA user_version = {SCHEMA_VERSION};
COMMIT;
"""
_JOB_COLUMNS = (
    "id, state, partitions, partitions_done, workload, params, priority, created_at, updated_at,"
    " error, result_digest"
)
_PARTITION_COLUMNS = "idx, state, synthesis_s, gpu_s, phases, digest, error, gpu, completed_at"


class JobState(StrEnum):
    """Queued → running → completed or failed; queued or running → cancelled."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class PartitionState(StrEnum):
    """A partition without a result is pending."""

    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"


_ACTIVE = (JobState.QUEUED, JobState.RUNNING)
_TERMINAL = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED)


class UnknownJob(KeyError):  # noqa: N818 - a domain name, like PoolExhausted
    """No job with this id is in the journal."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"unknown job {self.job_id!r}"


class NewerSchemaError(RuntimeError):
    """The file was written by a newer pacer, with a schema this version cannot read."""

    def __init__(self, path: Path, found: int) -> None:
        super().__init__(
            f"journal {path} has schema version {found}; this pacer reads up to version "
            f"{SCHEMA_VERSION}: upgrade pacer or use another journal file"
        )
        self.path = path
        self.found = found


@dataclass(frozen=True)
class JobRecord:
    """A job as journaled. Times are clock seconds; ``result_digest`` is set once completed."""

    id: str
    state: JobState
    partitions: int
    partitions_done: int
    workload: str | None
    params: dict[str, Any]
    priority: int
    created_at: float
    updated_at: float
    error: str | None
    result_digest: str | None


@dataclass(frozen=True)
class PartitionRecord:
    """One partition of a job. Durations in seconds; ``gpu`` is the index of the GPU that proved
    it; ``completed_at`` (clock seconds) is when it completed or failed. Pending: all None/empty.
    """

    job_id: str
    index: int
    state: PartitionState
    synthesis_s: float | None = None
    gpu_s: float | None = None
    phases: dict[str, float] = field(default_factory=dict)
    digest: str | None = None
    error: str | None = None
    gpu: int | None = None
    completed_at: float | None = None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_duration(name: str, seconds: float) -> None:
    number = isinstance(seconds, float) or _is_int(seconds)
    if not number or not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{name} must be a finite number of seconds >= 0, got {seconds!r}")


@dataclass(frozen=True)
class PartitionResult:
    """A proved partition, to journal. ``digest``: the proof's digest (no whitespace); durations
    in seconds; ``phases``: seconds per named GPU phase; ``gpu``: the index of the GPU used.
    """

    job_id: str
    index: int
    digest: str
    synthesis_s: float
    gpu_s: float
    phases: dict[str, float] = field(default_factory=dict)
    gpu: int | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.index) or self.index < 0:
            raise ValueError(f"index must be an integer >= 0, got {self.index!r}")
        if not isinstance(self.digest, str) or self.digest.split() != [self.digest]:
            raise ValueError(f"digest must be a non-empty string without spaces: {self.digest!r}")
        _check_duration("synthesis_s", self.synthesis_s)
        _check_duration("gpu_s", self.gpu_s)
        for phase, seconds in self.phases.items():
            _check_duration(f"phases[{phase!r}]", seconds)
        if self.gpu is not None and (not _is_int(self.gpu) or self.gpu < 0):
            raise ValueError(f"gpu must be a GPU index >= 0 or None, got {self.gpu!r}")


def result_digest(digests: Iterable[str]) -> str:
    """SHA-256 (hex) of the partition digests in index order, one per line: the same as
    ``printf '%s\\n' d0 d1 ... | sha256sum``.
    """
    h = hashlib.sha256()
    for digest in digests:
        h.update(digest.encode() + b"\n")
    return h.hexdigest()


def _checked_params_json(
    partitions: int, workload: str | None, params: dict[str, Any], priority: int
) -> str:
    """Check a new job's fields; its params as JSON."""
    if not _is_int(partitions) or not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(
            f"partitions must be an integer from 1 to {MAX_PARTITIONS}, got {partitions!r}"
        )
    if workload is not None and (not isinstance(workload, str) or not workload):
        raise ValueError(f"workload must be a non-empty string or None, got {workload!r}")
    if not _is_int(priority) or not -(2**63) <= priority < 2**63:
        raise ValueError(f"priority must be a 64-bit integer, got {priority!r}")
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise ValueError(f"params must be a dict with string keys, got {params!r}")
    try:
        return json.dumps(params, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ValueError(f"params must be JSON-serializable with finite numbers: {e}") from e


def _check_index(job: JobRecord, index: int) -> None:
    if not _is_int(index) or not 0 <= index < job.partitions:
        raise ValueError(
            f"index must be from 0 to {job.partitions - 1} for job {job.id}, got {index!r}"
        )


def _job(row: tuple[Any, ...]) -> JobRecord:
    id_, state, partitions, done, workload, params, priority, created, updated, error, digest = row
    return JobRecord(
        id_, JobState(state), partitions, done, workload, json.loads(params), priority,
        created, updated, error, digest,
    )  # fmt: skip


class Journal:
    """The service's job journal in the SQLite file at ``path`` (created if missing).

    ``clock`` gives wall-clock seconds for ``created_at``/``updated_at`` and retention. Every
    write is one transaction, durable when the method returns. Use it from one thread.

    >>> with Journal(path) as journal:
    ...     job = journal.add_job(4, "sha-chain", {"depth": 20})
    """

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._db = sqlite3.connect(path, isolation_level=None)
        try:
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            found = self._db.execute("PRAGMA user_version").fetchone()[0]
            if found > SCHEMA_VERSION:
                raise NewerSchemaError(path, found)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            if found < SCHEMA_VERSION:
                self._db.executescript(_SCHEMA)
        except BaseException:
            self._db.close()
            raise

    def close(self) -> None:
        """Close the file; later calls raise ``sqlite3.ProgrammingError``. Idempotent."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def _require(self, job_id: str) -> JobRecord:
        job = self.get_job(job_id)
        if job is None:
            raise UnknownJob(job_id)
        return job

    def add_job(
        self, partitions: int, workload: str | None, params: dict[str, Any], priority: int = 0
    ) -> JobRecord:
        """Journal a queued job of ``partitions`` partitions; higher ``priority`` resumes first.

        ``params`` must be JSON-serializable; the record holds them as read back from JSON.
        """
        params_json = _checked_params_json(partitions, workload, params, priority)
        now = self._clock()
        job = JobRecord(
            uuid.uuid4().hex[:16], JobState.QUEUED, partitions, 0, workload,
            json.loads(params_json), priority, now, now, None, None,
        )  # fmt: skip
        with self._transaction() as db:
            db.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, NULL, NULL)",
                (job.id, job.state, partitions, workload, params_json, priority, now, now),
            )
        return job

    def _transition(self, job: JobRecord, to: JobState, error: str | None = None) -> JobRecord:
        """Move a queued or running job to ``to``, in the open transaction; others are as is."""
        if job.state not in _ACTIVE or job.state == to:
            return job
        now = self._clock()
        self._db.execute(
            "UPDATE jobs SET state = ?, error = ?, updated_at = ? WHERE id = ?",
            (to, error, now, job.id),
        )
        return replace(job, state=to, error=error, updated_at=now)

    def mark_running(self, job_id: str) -> JobRecord:
        """A queued job's first partitions were dispatched: it is running. Others are unchanged."""
        with self._transaction():
            return self._transition(self._require(job_id), JobState.RUNNING)

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued or running job; a finished one is returned as is; None if unknown."""
        with self._transaction():
            job = self.get_job(job_id)
            return None if job is None else self._transition(job, JobState.CANCELLED)

    def complete_partitions(self, items: Iterable[PartitionResult]) -> list[JobRecord]:
        """Journal proved partitions in one transaction; return the jobs this completed.

        A partition already completed, or of a job no longer queued or running, is skipped, so
        a job completes once. A job with a new result becomes running. If any item names an
        unknown job (``UnknownJob``) or an index out of range (``ValueError``), nothing is written.
        """
        by_job: dict[str, list[PartitionResult]] = {}
        for item in items:
            by_job.setdefault(item.job_id, []).append(item)
        now = self._clock()
        completed: list[JobRecord] = []
        with self._transaction() as db:
            for job_id, results in by_job.items():
                job = self._require(job_id)
                _check_index(job, max(r.index for r in results))
                if job.state not in _ACTIVE:
                    continue
                rows = [
                    (r.index, PartitionState.COMPLETED, r.synthesis_s, r.gpu_s,
                     json.dumps(r.phases), r.digest, r.gpu, now, job_id)
                    for r in results
                ]  # fmt: skip
                added = db.executemany(
                    f"INSERT OR IGNORE INTO partitions ({_PARTITION_COLUMNS}, job_id)"
                    " VALUES (?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)",
                    rows,
                ).rowcount
                if added == 0:
                    continue
                job = replace(job, partitions_done=job.partitions_done + added, updated_at=now)
                if job.partitions_done < job.partitions:
                    job = replace(job, state=JobState.RUNNING)
                else:
                    digests = db.execute(
                        "SELECT digest FROM partitions WHERE job_id = ? ORDER BY idx", (job_id,)
                    )
                    digest = result_digest(d for (d,) in digests)
                    job = replace(job, state=JobState.COMPLETED, result_digest=digest)
                    completed.append(job)
                db.execute(
                    "UPDATE jobs SET state = ?, partitions_done = ?, updated_at = ?,"
                    " result_digest = ? WHERE id = ?",
                    (job.state, job.partitions_done, now, job.result_digest, job_id),
                )
        return completed

    def fail_partition(self, job_id: str, index: int, error: str) -> JobRecord:
        """A partition failed: so does its queued or running job, with ``error``.

        Partitions not completed stay pending. A finished job is returned as is.
        """
        if not isinstance(error, str) or not error:
            raise ValueError(f"error must be a non-empty string, got {error!r}")
        with self._transaction() as db:
            job = self._require(job_id)
            _check_index(job, index)
            if job.state in _ACTIVE:
                db.execute(
                    "INSERT OR IGNORE INTO partitions (job_id, idx, state, phases, error,"
                    " completed_at) VALUES (?, ?, ?, '{}', ?, ?)",
                    (job_id, index, PartitionState.FAILED, error, self._clock()),
                )
            return self._transition(job, JobState.FAILED, error)

    def get_job(self, job_id: str) -> JobRecord | None:
        """The job with this id, or None."""
        rows = self._db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", (job_id,))
        row = rows.fetchone()
        return None if row is None else _job(row)

    def list_jobs(self, state: JobState | None = None, limit: int = 100) -> list[JobRecord]:
        """Up to ``limit`` jobs, newest first; only those in ``state`` if given."""
        if not _is_int(limit) or limit < 1:
            raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
        newest = "ORDER BY created_at DESC, seq DESC LIMIT ?"
        if state is None:
            rows = self._db.execute(f"SELECT {_JOB_COLUMNS} FROM jobs {newest}", (limit,))
        else:
            rows = self._db.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state = ? {newest}", (state, limit)
            )
        return [_job(row) for row in rows]

    def partitions(self, job_id: str) -> list[PartitionRecord]:
        """All the job's partitions in index order, pending ones included; ``UnknownJob`` if
        there is no such job.
        """
        job = self._require(job_id)
        rows = self._db.execute(
            f"SELECT {_PARTITION_COLUMNS} FROM partitions WHERE job_id = ?", (job_id,)
        )
        stored = {
            idx: PartitionRecord(job_id, idx, PartitionState(state), synthesis_s, gpu_s,
                                 json.loads(phases), digest, error, gpu, completed_at)
            for idx, state, synthesis_s, gpu_s, phases, digest, error, gpu, completed_at in rows
        }  # fmt: skip
        pending = PartitionState.PENDING
        return [stored.get(i) or PartitionRecord(job_id, i, pending) for i in range(job.partitions)]

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, 0 if none)."""
        counts = dict.fromkeys(JobState, 0)
        for state, count in self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state"):
            counts[JobState(state)] = count
        return counts

    def incomplete(self) -> list[tuple[JobRecord, list[int]]]:
        """Queued and running jobs, higher priority then older first, each with the indices of
        its partitions not yet completed (ascending): what a restarted service dispatches again.
        """
        rows = self._db.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state IN (?, ?)"
            " ORDER BY priority DESC, created_at, seq",
            _ACTIVE,
        )
        return [(job, self._pending(job)) for job in map(_job, rows.fetchall())]

    def _pending(self, job: JobRecord) -> list[int]:
        if job.partitions_done == 0:
            return list(range(job.partitions))
        rows = self._db.execute(
            "SELECT idx FROM partitions WHERE job_id = ? AND state = ?",
            (job.id, PartitionState.COMPLETED),
        )
        done = {idx for (idx,) in rows}
        return [i for i in range(job.partitions) if i not in done]

    def save_estimates(self, values: Mapping[str, float | None], key: str | None = None) -> None:
        """Store the controller's estimates (seconds, or None if unknown), replacing those
        saved before, with ``key``: what they are valid for (``pacer.estimates.estimates_key``).
        """
        for name, value in values.items():
            if not isinstance(name, str) or name == _ESTIMATES_KEY:
                raise ValueError(f"estimate names must be strings other than {_ESTIMATES_KEY!r}, "
                                 f"got {name!r}")  # fmt: skip
            if value is not None:
                _check_duration(f"estimate {name!r}", value)
        if key is not None and not isinstance(key, str):
            raise ValueError(f"the estimates' key must be a string, got {key!r}")
        blob = json.dumps({**values, _ESTIMATES_KEY: key}, sort_keys=True)
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO estimates (id, estimates) VALUES (1, ?)", (blob,))

    def _saved_estimates(self) -> dict[str, Any] | None:
        row = self._db.execute("SELECT estimates FROM estimates WHERE id = 1").fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def load_estimates(self) -> dict[str, float | None] | None:
        """The estimates last saved, or None if none were."""
        values = self._saved_estimates()
        if values is None:
            return None
        values.pop(_ESTIMATES_KEY, None)
        return {k: None if v is None else float(v) for k, v in values.items()}

    def load_estimates_key(self) -> str | None:
        """The key the estimates were saved with; None if none was (or nothing was saved)."""
        values = self._saved_estimates()
        key = None if values is None else values.get(_ESTIMATES_KEY)
        return key if isinstance(key, str) else None

    def prune(self, retention_s: float) -> int:
        """Delete finished jobs, and their partitions, last updated more than ``retention_s``
        seconds ago. Returns how many jobs were deleted.
        """
        _check_duration("retention_s", retention_s)
        cutoff = self._clock() - retention_s
        finished = "SELECT id FROM jobs WHERE state IN (?, ?, ?) AND updated_at < ?"
        with self._transaction() as db:
            db.execute(f"DELETE FROM partitions WHERE job_id IN ({finished})", (*_TERMINAL, cutoff))
            deleted = db.execute(f"DELETE FROM jobs WHERE id IN ({finished})", (*_TERMINAL, cutoff))
            return deleted.rowcount
