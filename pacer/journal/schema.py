"""The SQLite journal's schema, its versions and their migrations, and opening a file at the
current version.

Schema versions (``PRAGMA user_version``): 1, jobs, partitions and estimates; 2, an idempotency
key and request digest per job, an index of failed partitions, and the attempts table; 3, the
engines' estimates by workload key (``workload_estimates``). An older
file is upgraded in place when opened; a newer one is refused (`NewerSchemaError`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pacer.journal.lock import create_journal_file
from pacer.journal.records import JournalFileError

SCHEMA_VERSION = 3

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
    3: (
        # Engines paced over the engine protocol: each workload's estimates, so its next
        # session starts warm.
        """CREATE TABLE IF NOT EXISTS workload_estimates (
    workload_key TEXT PRIMARY KEY, estimates TEXT NOT NULL) WITHOUT ROWID""",
    ),
}


class NewerSchemaError(JournalFileError):
    """The file was written by a newer pacer, with a schema this version cannot read."""

    def __init__(self, path: Path, found: int) -> None:
        super().__init__(
            path,
            f"journal {path} has schema version {found}; this pacer reads up to version "
            f"{SCHEMA_VERSION}: upgrade pacer or use another journal file",
        )
        self.found = found


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, taken at once (``BEGIN IMMEDIATE``): committed when the block
    ends, rolled back when it raises."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    """Open the file at ``path`` (created if missing) in WAL mode with ``synchronous=FULL``,
    brought to SCHEMA_VERSION; ``NewerSchemaError`` if it is past it. A new file is made
    readable by its owner only, and SQLite gives its -wal and -shm files the same mode."""
    create_journal_file(path)
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute(f"PRAGMA busy_timeout = {round(busy_timeout_s * 1000)}")
        found = db.execute("PRAGMA user_version").fetchone()[0]
        if found > SCHEMA_VERSION:
            raise NewerSchemaError(path, found)
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        if found < SCHEMA_VERSION:
            _migrate(db)
    except BaseException:
        db.close()
        raise
    return db


def _migrate(db: sqlite3.Connection) -> None:
    """Bring the file to SCHEMA_VERSION in one transaction. The version is read again under
    the write lock: another process may have upgraded the file meanwhile."""
    with transaction(db):
        found = db.execute("PRAGMA user_version").fetchone()[0]
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[version]:
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
