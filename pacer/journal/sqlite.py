"""The journal in an SQLite file: `SqliteJournal`, what the service runs on.

Used from one thread (the journal's own, in the service). The file is in WAL mode with
``synchronous=FULL``: every write method has committed, and fsynced, before it returns. Only
partitions that finished have a row; a partition without one is pending, so adding a job of a
million partitions writes one row, and a page of partitions reads at most a page of rows.

`SqliteJournal` holds the file's connection, and the core that writes (`JournalCore`) and
reads (`JournalQueries`) through a `SqliteDialect`; `schema` opens the file at the current
version.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Self

from pacer.journal.core import JournalCore
from pacer.journal.queries import JournalQueries
from pacer.journal.records import (
    Attempt,
    JobKey,
    JobRecord,
    JobState,
    JournalFileError,
    PartitionRecord,
    PartitionResult,
    PartitionSummary,
)
from pacer.journal.schema import connect, transaction
from pacer.journal.sqlite_dialect import SqliteDialect
from pacer.ranges import IndexRanges

BUSY_TIMEOUT_S = 5.0


class JournalFileGoneError(JournalFileError):
    """The journal's path no longer names the file that was opened (deleted, or replaced):
    what is written now would not be read by the next start."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(
            path,
            f"journal file {path} was {problem} while open: results are kept in memory; put the "
            "file back, or restart pacer (the partitions not committed are proved again)",
        )
        self.problem = problem


def _identity(path: Path) -> tuple[int, int]:
    """(device, inode) of the file at ``path``."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


class SqliteJournal:
    """The service's job journal in the SQLite file at ``path`` (created if missing).

    ``clock`` gives wall-clock seconds for ``created_at``/``updated_at`` and retention. Every
    write is one transaction, durable when the method returns. A write waits up to
    ``busy_timeout_s`` for another connection's lock, then raises ``sqlite3.OperationalError``
    (database is locked). Use it from one thread. Each method's contract is in
    `JournalBackend`.

    >>> with SqliteJournal(path) as journal:
    ...     job = journal.add_job(4, "sha-chain", {"depth": 20})
    """

    Error: ClassVar[type[Exception]] = sqlite3.Error
    OperationalError: ClassVar[type[Exception]] = sqlite3.OperationalError

    def __init__(
        self,
        path: Path,
        clock: Callable[[], float] = time.time,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
    ) -> None:
        if not busy_timeout_s >= 0:
            raise ValueError(f"busy_timeout_s must be >= 0, got {busy_timeout_s!r}")
        self.path = Path(path)
        self._db = connect(path, busy_timeout_s)
        try:
            self._identity = _identity(self.path)
        except BaseException:
            self._db.close()
            raise
        sql = SqliteDialect(self._db, clock, self._transaction)
        self._core = JournalCore(sql)
        self._queries = JournalQueries(sql)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction on the file: every write of this journal opens it here."""
        with transaction(self._db) as db:
            yield db

    # -- jobs ---------------------------------------------------------------------------------
    def add_job(
        self, partitions: int, workload: str | None, params: dict[str, Any], priority: int = 0
    ) -> JobRecord:
        """Journal a queued job of ``partitions`` partitions; higher ``priority`` resumes first."""
        return self._core.add_job(partitions, workload, params, priority)

    def add_job_once(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> tuple[JobRecord, bool]:  # fmt: skip
        """``add_job`` under an idempotency key: the job, and whether it is new."""
        return self._core.add_job_once(key, partitions, workload, params, priority)

    def job_for_key(
        self, key: str, partitions: int, workload: str | None, params: dict[str, Any],
        priority: int = 0,
    ) -> JobRecord | None:  # fmt: skip
        """The job ``key`` names if it was added with this request, None if the key is new."""
        return self._core.job_for_key(key, partitions, workload, params, priority)

    def mark_running(self, job_id: str) -> JobRecord:
        """A queued job's first partitions were dispatched: it is running."""
        return self._core.mark_running(job_id)

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued or running job; a finished one as is; None if unknown."""
        return self._core.cancel(job_id)

    def get_job(self, job_id: str) -> JobRecord | None:
        """The job with this id, or None."""
        return self._queries.get_job(job_id)

    def list_jobs(self, state: JobState | None = None, limit: int = 100) -> list[JobRecord]:
        """Up to ``limit`` jobs, newest first; only those in ``state`` if given."""
        return self._queries.list_jobs(state, limit)

    def jobs_page(
        self, state: JobState | None, limit: int, after: JobKey | None = None
    ) -> tuple[list[JobRecord], JobKey | None]:
        """A page of ``list_jobs`` from the job after ``after``, and the key of its last job."""
        return self._queries.jobs_page(state, limit, after)

    def counts(self) -> dict[JobState, int]:
        """How many jobs are in each state (every state present)."""
        return self._queries.counts()

    def incomplete(self) -> list[tuple[JobRecord, IndexRanges]]:
        """Queued and running jobs, each with its partitions not yet completed."""
        return self._queries.incomplete()

    def prune(self, retention_s: float) -> int:
        """Delete finished jobs last updated over ``retention_s`` ago; how many."""
        return self._core.prune(retention_s)

    # -- partitions ---------------------------------------------------------------------------
    def complete_partitions(self, items: Iterable[PartitionResult]) -> list[JobRecord]:
        """Journal proved partitions at once, all or none; the jobs this completed."""
        return self._core.complete_partitions(items)

    def fail_partition(self, job_id: str, index: int, error: str) -> JobRecord:
        """A partition failed: so does its queued or running job, with ``error``."""
        return self._core.fail_partition(job_id, index, error)

    def record_attempt(
        self, job_id: str, index: int, reason: str, gpu: int | None, max_attempts: int
    ) -> tuple[int, JobRecord]:
        """Journal a failed attempt; its number (0: the job is finished) and the job."""
        return self._core.record_attempt(job_id, index, reason, gpu, max_attempts)

    def fail_exhausted(self, max_attempts: int) -> list[JobRecord]:
        """Fail the active jobs with a partition that has had ``max_attempts`` attempts."""
        return self._core.fail_exhausted(max_attempts)

    def failures(self, job_id: str, limit: int = 5) -> list[Attempt]:
        """The job's last ``limit`` failed attempts, newest first."""
        return self._queries.failures(job_id, limit)

    def partitions(self, job_id: str) -> list[PartitionRecord]:
        """All the job's partitions in index order, pending ones included."""
        return self._queries.partitions(job_id)

    def partition_page(self, job_id: str, offset: int, limit: int) -> list[PartitionRecord]:
        """The job's partitions ``offset`` to ``offset + limit - 1``, pending ones included."""
        return self._queries.partition_page(job_id, offset, limit)

    def partition_summary(self, job_id: str, failures: int = 5) -> PartitionSummary:
        """Counts of the job's partitions by state and its first ``failures`` failures."""
        return self._queries.partition_summary(job_id, failures)

    # -- estimates ----------------------------------------------------------------------------
    def save_estimates(self, values: Mapping[str, float | None], key: str | None = None) -> None:
        """Store the controller's estimates (s, None if unknown), replacing those saved."""
        self._core.save_estimates(values, key)

    def load_estimates(self) -> dict[str, float | None] | None:
        """The estimates last saved, or None."""
        return self._queries.load_estimates()

    def load_estimates_key(self) -> str | None:
        """What the saved estimates are valid for, or None."""
        return self._queries.load_estimates_key()

    # -- the file -----------------------------------------------------------------------------
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

    def close(self) -> None:
        """Close the file; later calls raise ``sqlite3.ProgrammingError``. Idempotent."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
