"""The job journal: jobs and their partition results, kept so that a restart resumes.

The service speaks to it through `JournalBackend` (`interface`), opened by `open_journal`
(`factory`); a journal a fleet of pacers shares is also a `FleetBackend` (`fleet_backend`:
claims and leases; `pacer.pgjournal` keeps it in PostgreSQL). The rules and queries are written
once: `JournalCore` (`core`, the writes) and `JournalQueries` (`queries`, the reads) run on a
`Dialect` (`dialect`), which holds only what SQLite and PostgreSQL do differently.
`SqliteJournal` (`sqlite`, also named `Journal`) keeps the journal in an SQLite file through
`SqliteDialect` (`sqlite_dialect`), whose versions and migrations are in `schema`.
What it holds and answers, whatever stores it, is in `records` and `rows`; what it checks
before it writes, in `checks`. One service per file: `JournalLock` (`lock`) holds
a lock on the file itself.
"""

from pacer.journal.factory import open_fleet_journal, open_journal
from pacer.journal.fleet_backend import Claim, FleetBackend, HostInUseError, Lease
from pacer.journal.interface import JournalBackend
from pacer.journal.lock import JournalInUseError, JournalLock
from pacer.journal.records import (
    MAX_IDEMPOTENCY_KEY,
    MAX_PAGE,
    MAX_PARTITIONS,
    Attempt,
    IdempotencyConflict,
    JobKey,
    JobRecord,
    JobState,
    JournalFileError,
    JournalRefusedError,
    LeaseToken,
    PartitionRecord,
    PartitionResult,
    PartitionState,
    PartitionSummary,
    UnknownJob,
    result_digest,
)
from pacer.journal.schema import SCHEMA_VERSION, NewerSchemaError
from pacer.journal.sqlite import BUSY_TIMEOUT_S, JournalFileGoneError, SqliteJournal

Journal = SqliteJournal  # the backend pacer runs on, by its short name

__all__ = [
    "BUSY_TIMEOUT_S",
    "MAX_IDEMPOTENCY_KEY",
    "MAX_PAGE",
    "MAX_PARTITIONS",
    "SCHEMA_VERSION",
    "Attempt",
    "Claim",
    "FleetBackend",
    "HostInUseError",
    "IdempotencyConflict",
    "JobKey",
    "JobRecord",
    "JobState",
    "Journal",
    "JournalBackend",
    "JournalFileError",
    "JournalFileGoneError",
    "JournalInUseError",
    "JournalLock",
    "JournalRefusedError",
    "Lease",
    "LeaseToken",
    "NewerSchemaError",
    "PartitionRecord",
    "PartitionResult",
    "PartitionState",
    "PartitionSummary",
    "SqliteJournal",
    "UnknownJob",
    "open_fleet_journal",
    "open_journal",
    "result_digest",
]
