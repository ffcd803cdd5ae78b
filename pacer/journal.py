"""The job journal: jobs and their partition results in an SQLite file, so a restart resumes.

Used from one thread (the event loop's). The file is in WAL mode with ``synchronous=FULL``: every
write method has committed, and fsynced, before it returns. Only partitions that finished have a
row; a partition without one is pending, so adding a job of a million partitions writes one row,
and a page of partitions (``partition_page``) reads at most a page of rows. Each failed attempt
of a partition has a row in ``attempts`` (its reason), so a restart knows how many attempts a
pending partition has had.

Schema versions (``PRAGMA user_version``): 1, jobs, partitions and estimates; 2, an idempotency
key and request digest per job, an index of failed partitions, and the attempts table. An older
file is upgraded in place when opened.

One service per file: `JournalLock` holds ``<journal>.lock`` exclusively while a service runs.
`Journal.check_file` tells when the path no longer names the file that was opened.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Self

from pacer.ranges import IndexRanges

_ESTIMATES_KEY = "key"  # beside the estimates in their JSON: what they are valid for

SCHEMA_VERSION = 2
MAX_PARTITIONS = 1_000_000
MAX_PAGE = 1_000
MAX_IDEMPOTENCY_KEY = 128
BUSY_TIMEOUT_S = 5.0

# The statements that bring a file from version n - 1 to n, run in one transaction.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, state TEXT NOT NULL,
    partitions INTEGER NOT NULL, partitions_done INTEGER NOT NULL, workload TEXT,
    params TEXT NOT NULL, priority INTEGER NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, error TEXT, result_digest TEXT)""",
        "CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, created_at, seq)",
        "CREATE INDEX IF NOT EXISTS jobs_by_age ON jobs (created_at, seq)",
        "CREATE INDEX IF NOT EXISTS jobs_by_update ON jobs (state, updated_at)",
        """CREATE TABLE IF NOT EXISTS partitions (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, state TEXT NOT NULL, synthesis_s REAL,
    gpu_s REAL, phases TEXT NOT NULL, digest TEXT, error TEXT, gpu INTEGER,
    completed_at REAL NOT NULL, PRIMARY KEY (job_id, idx)) WITHOUT ROWID""",
        """CREATE TABLE IF NOT EXISTS estimates (
    id INTEGER PRIMARY KEY CHECK (id = 1), estimates TEXT NOT NULL)""",
    ),
    2: (
        # A retried submission names the job it created by its key; the digest of the request
        # tells a retry from a different request reusing the key. Kept as long as the job.
        "ALTER TABLE jobs ADD COLUMN idempotency_key TEXT",
        "ALTER TABLE jobs ADD COLUMN request_digest TEXT",
        "CREATE UNIQUE INDEX IF NOT EXISTS jobs_by_key ON jobs (idempotency_key)"
        " WHERE idempotency_key IS NOT NULL",
        # A job's failures without scanning its million completed rows.
        "CREATE INDEX IF NOT EXISTS partitions_failed ON partitions (job_id, idx)"
        " WHERE state = 'failed'",
        # Each failed attempt of a partition and why, so retries count across restarts.
        """CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL, idx INTEGER NOT NULL, attempt INTEGER NOT NULL, reason TEXT NOT NULL,
    gpu INTEGER, at REAL NOT NULL, PRIMARY KEY (job_id, idx, attempt)) WITHOUT ROWID""",
    ),
}
_JOB_COLUMNS = (
    "id, state, partitions, partitions_done, workload, params, priority, created_at, updated_at,"
    " error, result_digest"
)
_FAILED = "INDEXED BY partitions_failed"
_PARTITION_COLUMNS = "idx, state, synthesis_s, gpu_s, phases, digest, error, gpu, completed_at"
_ATTEMPT_COLUMNS = "idx, attempt, reason, gpu, at"


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


class IdempotencyConflict(ValueError):  # noqa: N818 - a domain name, like UnknownJob
    """An idempotency key already names a job that was submitted with a different request."""

    def __init__(self, key: str, job_id: str) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was used for job {job_id} with a different request; a "
            "key may only repeat the request it was first sent with"
        )
        self.key = key
        self.job_id = job_id


class NewerSchemaError(RuntimeError):
    """The file was written by a newer pacer, with a schema this version cannot read."""

    def __init__(self, path: Path, found: int) -> None:
        super().__init__(
            f"journal {path} has schema version {found}; this pacer reads up to version "
            f"{SCHEMA_VERSION}: upgrade pacer or use another journal file"
        )
        self.path = path
        self.found = found


class JournalInUseError(RuntimeError):
    """Another process holds the journal's lock: a second service on one file would prove its
    jobs twice. ``holder`` is what the holder wrote into the lock file (its pid and host)."""

    def __init__(self, path: Path, lock_path: Path, holder: str) -> None:
        super().__init__(
            f"journal {path} is in use by {holder} (it holds {lock_path}): stop that pacer, "
            "or give this one another journal file"
        )
        self.path = path
        self.lock_path = lock_path
        self.holder = holder


class JournalFileGoneError(RuntimeError):
    """The journal's path no longer names the file that was opened (deleted, or replaced):
    what is written now would not be read by the next start."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            f"journal file {path} was {problem} while open: results are kept in memory; put the "
            "file back, or restart pacer (the partitions not committed are proved again)"
        )
        self.path = path
        self.problem = problem


class JournalLock:
    """An exclusive lock on the journal at ``path``: ``flock`` on ``<path>.lock`` beside it,
    which names the holder (``pid 1234 on host-a``).

    A lock file of its own, not the database: SQLite takes POSIX (fcntl) byte-range locks on the
    database, and those are per process, so closing any descriptor of the file would drop a
    second one taken on it. flock belongs to the open file, and the kernel releases it when the
    process ends, SIGKILL included: a restart after a crash is never blocked. The file stays (a
    lock file unlinked on exit would let a third process lock a new file while a second still
    holds the old one).

    >>> lock = JournalLock(path)
    >>> lock.acquire()  # JournalInUseError, naming the holder, if another process has it
    >>> lock.release()
    """

    def __init__(self, path: Path) -> None:
        self.journal_path = Path(path)
        self.path = self.journal_path.with_name(self.journal_path.name + ".lock")
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise ``JournalInUseError`` at once if another holder has it."""
        if self._fd is not None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip()
            os.close(fd)
            raise JournalInUseError(
                self.journal_path, self.path, holder or "a process that has not named itself yet"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Give the lock up (closing the file releases it). Idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


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
class Attempt:
    """A failed attempt of partition ``index``: the ``attempt``-th (from 1), why (``reason``),
    on which GPU (None if it failed before proving) and when (``at``, clock seconds)."""

    index: int
    attempt: int
    reason: str
    gpu: int | None
    at: float


@dataclass(frozen=True)
class PartitionRecord:
    """One partition of a job. Durations in seconds; ``gpu`` is the index of the GPU that proved
    it; ``completed_at`` (clock seconds) is when it completed or failed. Pending: all None/empty.
    ``attempts``: its failed attempts, oldest first, whatever its state.
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
    attempts: list[Attempt] = field(default_factory=list)


@dataclass(frozen=True)
class PartitionSummary:
    """How many of a job's partitions are pending (no result yet: waiting, synthesizing or
    proving), completed and failed, and its first failures as (index, error), lowest first."""

    pending: int
    completed: int
    failed: int
    first_failures: list[tuple[int, str]]


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


def _keyed_request(
    key: str, partitions: int, workload: str | None, params: dict[str, Any], priority: int
) -> tuple[str, str]:
    """Check a keyed job request; its params as JSON and the request's digest (SHA-256 of its
    canonical form: the same request, the same digest)."""
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise ValueError(
            f"idempotency key must be a string of 1 to {MAX_IDEMPOTENCY_KEY} characters, "
            f"got {key!r:.80}"
        )
    params_json = _checked_params_json(partitions, workload, params, priority)
    canonical = json.dumps([partitions, workload, json.loads(params_json), priority],
                           sort_keys=True, separators=(",", ":"))  # fmt: skip
    return params_json, hashlib.sha256(canonical.encode()).hexdigest()


def _check_index(job: JobRecord, index: int) -> None:
    if not _is_int(index) or not 0 <= index < job.partitions:
        raise ValueError(
            f"index must be from 0 to {job.partitions - 1} for job {job.id}, got {index!r}"
        )


def _exhausted(index: int, attempts: int, reason: str) -> str:
    """A failed job's error: which partition, after how many attempts, and the last reason."""
    plural = "attempt" if attempts == 1 else "attempts"
    return f"partition {index} failed after {attempts} {plural}: {reason}"


def _identity(path: Path) -> tuple[int, int]:
    """(device, inode) of the file at ``path``."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _job(row: tuple[Any, ...]) -> JobRecord:
    id_, state, partitions, done, workload, params, priority, created, updated, error, digest = row
    return JobRecord(
        id_, JobState(state), partitions, done, workload, json.loads(params), priority,
        created, updated, error, digest,
    )  # fmt: skip


class Journal:
    """The service's job journal in the SQLite file at ``path`` (created if missing).

    ``clock`` gives wall-clock seconds for ``created_at``/``updated_at`` and retention. Every
    write is one transaction, durable when the method returns. A write waits up to
    ``busy_timeout_s`` for another connection's lock, then raises ``sqlite3.OperationalError``
    (database is locked). Use it from one thread.

    >>> with Journal(path) as journal:
    ...     job = journal.add_job(4, "sha-chain", {"depth": 20})
    """

    def __init__(
        self,
        path: Path,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        if not busy_timeout_s >= 0:
            raise ValueError(f"busy_timeout_s must be >= 0, got {busy_timeout_s!r}")
        self.path = Path(path)
        self._clock = clock
        self._db = sqlite3.connect(path, isolation_level=None)
        try:
            self._db.execute(f"PRAGMA busy_timeout = {round(busy_timeout_s * 1000)}")
            found = self._db.execute("PRAGMA user_version").fetchone()[0]
            if found > SCHEMA_VERSION:
                raise NewerSchemaError(path, found)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            if found < SCHEMA_VERSION:
                self._migrate()
            self._identity = _identity(self.path)
        except BaseException:
            self._db.close()
            raise

    def _migrate(self) -> None:
        """Bring the file to SCHEMA_VERSION in one transaction. The version is read again under
        the write lock: another process may have upgraded the file meanwhile."""
        with self._transaction() as db:
            found = db.execute("PRAGMA user_version").fetchone()[0]
            for version in range(found + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version]:
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the file; later calls raise ``sqlite3.ProgrammingError``. Idempotent."""
        self._db.close()

    def check_file(self) -> None:
        """Raise ``JournalFileGoneError`` if the path no longer names the file that was opened: it
        was deleted, or replaced by another file. One ``stat``; a file moved away and back is
        fine again."""
        try:
            identity = _identity(self.path)
        except FileNotFoundError:
            raise JournalFileGoneError(self.path, "deleted or moved away") from None
        if identity != self._identity:
            raise JournalFileGoneError(self.path, "replaced by another file")

    def probe(self) -> None:
        """Commit a write that changes nothing (the header's user version, rewritten): raises
        as any write would while the file cannot take one (locked, read-only, I/O errors)."""
        with self._transaction() as db:
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            db.execute(f"PRAGMA user_version = {version}")

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
        with self._transaction():
            return self._insert_job(partitions, workload, params_json, priority, None, None)

    def add_job_once(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> tuple[JobRecord, bool]:  # fmt: skip
        """``add_job`` under an idempotency key: the job, and whether it is new.

        The first call with ``key`` journals the job; a later one with the same request returns
        that job (False); one with a different request raises ``IdempotencyConflict`` and writes
        nothing. The key is remembered as long as its job is (until ``prune``).
        """
        params_json, digest = _keyed_request(key, partitions, workload, params, priority)
        with self._transaction():
            job = self._job_for_key(key, digest)
            if job is not None:
                return job, False
            return self._insert_job(partitions, workload, params_json, priority, key, digest), True

    def job_for_key(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> JobRecord | None:  # fmt: skip
        """The job ``key`` names if it was added with this request; None if the key is new;
        ``IdempotencyConflict`` if it was added with another request. Writes nothing."""
        _, digest = _keyed_request(key, partitions, workload, params, priority)
        return self._job_for_key(key, digest)

    def _job_for_key(self, key: str, digest: str) -> JobRecord | None:
        row = self._db.execute(
            "SELECT id, request_digest FROM jobs WHERE idempotency_key = ?", (key,)
        ).fetchone()
        if row is None:
            return None
        if row[1] != digest:
            raise IdempotencyConflict(key, row[0])
        return self._require(row[0])

    def _insert_job(
        self, partitions: int, workload: str | None, params_json: str, priority: int,
        key: str | None, digest: str | None,
    ) -> JobRecord:  # fmt: skip
        """Insert a queued job, in the open transaction."""
        now = self._clock()
        job = JobRecord(
            uuid.uuid4().hex[:16], JobState.QUEUED, partitions, 0, workload,
            json.loads(params_json), priority, now, now, None, None,
        )  # fmt: skip
        self._db.execute(
            f"INSERT INTO jobs ({_JOB_COLUMNS}, idempotency_key, request_digest)"
            " VALUES (?, ?, ?, 0, ?, ?, ?, ?, ?, NULL, NULL, ?, ?)",
            (job.id, job.state, partitions, workload, params_json, priority, now, now, key,
             digest),
        )  # fmt: skip
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
        with self._transaction():
            job = self._require(job_id)
            _check_index(job, index)
            return self._fail(job, index, error) if job.state in _ACTIVE else job

    def record_attempt(
        self, job_id: str, index: int, reason: str, gpu: int | None, max_attempts: int
    ) -> tuple[int, JobRecord]:
        """Journal a failed attempt of a partition of a queued or running job; the attempt's
        number (from 1) and the job, failed once that is ``max_attempts``.

        The failed job's ``error`` names the partition, its attempts and the last reason; its
        other partitions not completed stay pending. Nothing is written for a finished job
        (number 0). ``UnknownJob`` or ``ValueError`` (index, reason) write nothing.
        """
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"reason must be a non-empty string, got {reason!r}")
        if not _is_int(max_attempts) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        with self._transaction() as db:
            job = self._require(job_id)
            _check_index(job, index)
            finished = db.execute(
                "SELECT 1 FROM partitions WHERE job_id = ? AND idx = ?", (job_id, index)
            ).fetchone()
            if job.state not in _ACTIVE or finished is not None:
                return 0, job
            (done,) = db.execute(
                "SELECT COUNT(*) FROM attempts WHERE job_id = ? AND idx = ?", (job_id, index)
            ).fetchone()
            attempt = done + 1
            now = self._clock()
            db.execute(
                f"INSERT INTO attempts (job_id, {_ATTEMPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                (job_id, index, attempt, reason, gpu, now),
            )
            if attempt < max_attempts:
                return attempt, job
            return attempt, self._fail(job, index, _exhausted(index, attempt, reason))

    def _fail(self, job: JobRecord, index: int, error: str) -> JobRecord:
        """In the open transaction: partition ``index`` failed, and so does its active job."""
        self._db.execute(
            "INSERT OR IGNORE INTO partitions (job_id, idx, state, phases, error, completed_at)"
            " VALUES (?, ?, ?, '{}', ?, ?)",
            (job.id, index, PartitionState.FAILED, error, self._clock()),
        )
        return self._transition(job, JobState.FAILED, error)

    def fail_exhausted(self, max_attempts: int) -> list[JobRecord]:
        """Fail every queued or running job with a pending partition that has had
        ``max_attempts`` failed attempts or more (the limit may have been lowered since, or
        the service stopped between an attempt and its job's failure); the jobs failed."""
        if not _is_int(max_attempts) or max_attempts < 1:
            raise ValueError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
        failed: list[JobRecord] = []
        with self._transaction() as db:
            rows = db.execute(
                "SELECT a.job_id, a.idx, COUNT(*), MAX(a.attempt) FROM attempts a"
                " JOIN jobs j ON j.id = a.job_id WHERE j.state IN (?, ?)"
                " AND NOT EXISTS (SELECT 1 FROM partitions p WHERE p.job_id = a.job_id"
                " AND p.idx = a.idx) GROUP BY a.job_id, a.idx HAVING COUNT(*) >= ?"
                " ORDER BY a.job_id, a.idx",
                (*_ACTIVE, max_attempts),
            ).fetchall()
            for job_id, index, count, last in rows:
                job = self._require(job_id)
                if job.state not in _ACTIVE:
                    continue  # failed by an earlier partition of this round
                (reason,) = db.execute(
                    "SELECT reason FROM attempts WHERE job_id = ? AND idx = ? AND attempt = ?",
                    (job_id, index, last),
                ).fetchone()
                failed.append(self._fail(job, index, _exhausted(index, count, reason)))
        return failed

    def failures(self, job_id: str, limit: int = 5) -> list[Attempt]:
        """The job's last ``limit`` failed attempts, newest first (any partition)."""
        if not _is_int(limit) or limit < 1:
            raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
        rows = self._db.execute(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE job_id = ?"
            " ORDER BY at DESC, idx DESC, attempt DESC LIMIT ?",
            (job_id, limit),
        )
        return [Attempt(*row) for row in rows]

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
        there is no such job. A list as long as the job: for small jobs and tests; the API
        pages with ``partition_page``.
        """
        job = self._require(job_id)
        return self._page(job, 0, job.partitions)

    def partition_page(self, job_id: str, offset: int, limit: int) -> list[PartitionRecord]:
        """The job's partitions ``offset`` to ``offset + limit - 1`` (fewer past its end), in
        index order, pending ones included; ``UnknownJob`` if there is no such job.

        Reads at most ``limit`` rows (``limit`` at most MAX_PAGE): the pending records of the
        page are made up for its index range only.
        """
        if not _is_int(offset) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        if not _is_int(limit) or not 1 <= limit <= MAX_PAGE:
            raise ValueError(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")
        return self._page(self._require(job_id), offset, limit)

    def _page(self, job: JobRecord, offset: int, limit: int) -> list[PartitionRecord]:
        end = min(offset + limit, job.partitions)
        if end <= offset:
            return []
        rows = self._db.execute(
            f"SELECT {_PARTITION_COLUMNS} FROM partitions WHERE job_id = ? AND idx >= ?"
            " AND idx < ? ORDER BY idx LIMIT ?",
            (job.id, offset, end, end - offset),
        )
        attempts: dict[int, list[Attempt]] = {}
        for row in self._db.execute(
            f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE job_id = ? AND idx >= ? AND idx < ?"
            " ORDER BY idx, attempt",
            (job.id, offset, end),
        ):
            attempts.setdefault(row[0], []).append(Attempt(*row))
        stored = {
            idx: PartitionRecord(job.id, idx, PartitionState(state), synthesis_s, gpu_s,
                                 json.loads(phases), digest, error, gpu, completed_at,
                                 attempts.get(idx, []))
            for idx, state, synthesis_s, gpu_s, phases, digest, error, gpu, completed_at in rows
        }  # fmt: skip
        pending = PartitionState.PENDING
        return [
            stored.get(i) or PartitionRecord(job.id, i, pending, attempts=attempts.get(i, []))
            for i in range(offset, end)
        ]

    def partition_summary(self, job_id: str, failures: int = 5) -> PartitionSummary:
        """Counts of the job's partitions by state and its first ``failures`` failures, without
        reading its completed rows; ``UnknownJob`` if there is no such job."""
        job = self._require(job_id)
        # The partial index of failures; on the primary key SQLite would read every row of
        # the job. The literal 'failed' (not a parameter) is what makes the index usable.
        failed = self._db.execute(
            f"SELECT COUNT(*) FROM partitions {_FAILED} WHERE job_id = ? AND state = 'failed'",
            (job_id,),
        ).fetchone()[0]
        first = self._db.execute(
            f"SELECT idx, error FROM partitions {_FAILED} WHERE job_id = ? AND state = 'failed'"
            " ORDER BY idx LIMIT ?",
            (job_id, failures),
        )
        return PartitionSummary(
            pending=job.partitions - job.partitions_done - failed,
            completed=job.partitions_done,
            failed=failed,
            first_failures=[(idx, error) for idx, error in first],
        )

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present, 0 if none)."""
        counts = dict.fromkeys(JobState, 0)
        for state, count in self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state"):
            counts[JobState(state)] = count
        return counts

    def incomplete(self) -> list[tuple[JobRecord, IndexRanges]]:
        """Queued and running jobs, higher priority then older first, each with its partitions
        not yet completed, as runs (a job of a million pending partitions is one run, not a
        million integers): what a restarted service dispatches again.
        """
        rows = self._db.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE state IN (?, ?)"
            " ORDER BY priority DESC, created_at, seq",
            _ACTIVE,
        )
        return [(job, self._pending(job)) for job in map(_job, rows.fetchall())]

    def _pending(self, job: JobRecord) -> IndexRanges:
        if job.partitions_done == 0:
            return IndexRanges.of(range(job.partitions))
        # In primary-key order, streamed: the gaps between completed partitions are the runs.
        rows = self._db.execute(
            "SELECT idx FROM partitions WHERE job_id = ? AND state = ? ORDER BY idx",
            (job.id, PartitionState.COMPLETED),
        )
        return IndexRanges.excluding(job.partitions, (idx for (idx,) in rows))

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
            db.execute(f"DELETE FROM attempts WHERE job_id IN ({finished})", (*_TERMINAL, cutoff))
            deleted = db.execute(f"DELETE FROM jobs WHERE id IN ({finished})", (*_TERMINAL, cutoff))
            return deleted.rowcount
