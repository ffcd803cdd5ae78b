"""The PostgreSQL journal's schema: its versions, the statements that bring a database to each,
and `migrate`, which every host runs as it starts.

The version is the one row of ``pacer_schema``. `migrate` runs in one transaction under an
advisory lock, so hosts that start at once migrate one after another: the first brings the
database to `SCHEMA_VERSION`, the others find it there and change nothing. DDL is
transactional in PostgreSQL: a migration that fails leaves the database as it was.

Version 1: jobs, partitions (a row only once a partition has a result), attempts, estimates
(a row per host: the controller is per host), and ``batches``, the fleet's queue: a job's
partitions not yet handed out are a few unclaimed rows of index runs (its lanes), and each
claim leases runs of them to a host (``claimed_by`` until ``lease_until``, on the database's
clock). `pacer.pgjournal.leases` says how claims work.

Version 2: fenced leases and one-round-trip commits (`pacer.pgjournal.functions`): a lease
carries a token, new at each claim (``batch_tokens``), and when it was last renewed
(``renewed_at``); ``pacer_claim`` returns the token, and lets no lease renewed before the server
started lapse within a lease's time of the start; ``pacer_commit`` stores results only
under leases still held, counting them per host in ``job_progress``. Jobs' pages keep room for
HOT updates of their progress.

Version 3: ``workload_estimates``, the engines' estimates by workload key (shared by the fleet:
an engine's workload is the same whichever host paces it).

Version 4: ``pacer_complete``, which ``pacer_commit`` (replaced) now calls, and
``pacer_settle``, the sweep that completes a job whose last commit stored all its results but
lost its count (`pacer.pgjournal.functions`); completed jobs' results packed into one row each
(``partition_packs``, ``jobs.packed``, ``pacer_pack``), read with the partition rows left
through the view ``partition_rows`` (`pacer.pgjournal.packs`).

Version 5: ``pacer_commit`` counts a result under a lease no longer held as refused whatever
its job's state (before, one for a job completed meanwhile was dropped uncounted).

Version 6: ``pacer_commit`` finds the leases its results finish by key.

Version 7: ``fleet_clock`` and ``pacer_back``: the grace after a restart covers any time the
fleet could not reach the server, a failover included.

Version 8: no vacuum truncates ``batches`` (``vacuum_truncate = false``): the table shrinks and
grows again within seconds, and a truncation waits for the table's exclusive lock.

Version 9: ``batches_by_lease`` indexes every row's ``lease_until`` (a free run's is NULL), and
``pacer_claim``'s scan for lapsed leases names only ``lease_until``: the holders' index, which
reads every lease row, dead ones included, can no longer serve it.

Version 10: ``pacer_commit`` counts a running job's progress only where no other commit holds
the job's row, and waits for the row only to start or to complete the job.
"""

from __future__ import annotations

import psycopg
from psycopg.rows import TupleRow

from pacer.journal.records import JournalRefusedError
from pacer.pgjournal.functions import (
    CLAIM_FUNCTION,
    CLOCK_SCHEMA,
    COMMIT_PROCEDURE,
    COMPLETE_FUNCTION,
    SETTLE_FUNCTION,
)
from pacer.pgjournal.packs import PACK_SCHEMA

SCHEMA_VERSION = 10

# pg_advisory_xact_lock's key for migrations: any constant no other application takes.
MIGRATION_LOCK = 0x7061636572_5347  # "pacer", "SG"

# A job's unclaimed partitions are split into this many runs at most, of at least
# LANE_PARTITIONS each: claimers lock runs with SKIP LOCKED, and with one run per job a
# concurrent claimer would skip the job entirely.
LANES = 16
LANE_PARTITIONS = 256

# The statements that bring a database from version n - 1 to n, run in one transaction.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE jobs (
    id text PRIMARY KEY, seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE, state text NOT NULL,
    partitions integer NOT NULL, partitions_done integer NOT NULL, workload text,
    params text NOT NULL, priority bigint NOT NULL, created_at double precision NOT NULL,
    updated_at double precision NOT NULL, error text, result_digest text,
    idempotency_key text UNIQUE, request_digest text)""",
        "CREATE INDEX jobs_by_state ON jobs (state, created_at, seq)",
        "CREATE INDEX jobs_by_age ON jobs (created_at, seq)",
        "CREATE INDEX jobs_by_update ON jobs (state, updated_at)",
        """CREATE TABLE partitions (
    job_id text NOT NULL, idx integer NOT NULL, state text NOT NULL,
    synthesis_s double precision, gpu_s double precision, phases text NOT NULL, digest text,
    error text, gpu integer, completed_at double precision NOT NULL,
    PRIMARY KEY (job_id, idx))""",
        "CREATE INDEX partitions_failed ON partitions (job_id, idx) WHERE state = 'failed'",
        """CREATE TABLE attempts (
    job_id text NOT NULL, idx integer NOT NULL, attempt integer NOT NULL, reason text NOT NULL,
    gpu integer, at double precision NOT NULL, PRIMARY KEY (job_id, idx, attempt))""",
        "CREATE TABLE estimates (host text PRIMARY KEY, estimates text NOT NULL)",
        # Each row a run [start, stop) of a job's partitions, with its place in the fleet's
        # order: its job's (priority, then age), then runs given back (a release, the rest
        # of a lapsed lease) before the job's lanes, each by where it began (``first``); so
        # claims read the free runs in order from one index. Room is left in each page: a
        # claim's update of a lane's start is then a HOT update, which no index sees.
        """CREATE TABLE batches (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id text NOT NULL,
    priority bigint NOT NULL, created_at double precision NOT NULL, seq bigint NOT NULL,
    given_back boolean NOT NULL DEFAULT false, first integer NOT NULL, start integer NOT NULL,
    stop integer NOT NULL, claimed_by text, lease_until timestamptz,
    CHECK (0 <= first AND first <= start AND start < stop),
    CHECK ((claimed_by IS NULL) = (lease_until IS NULL))) WITH (fillfactor = 50)""",
        "CREATE INDEX batches_free ON batches"
        " (priority DESC, created_at, seq, given_back DESC, first)"
        " WHERE claimed_by IS NULL",
        "CREATE INDEX batches_by_lease ON batches (lease_until) WHERE claimed_by IS NOT NULL",
        "CREATE INDEX batches_by_holder ON batches (claimed_by) WHERE claimed_by IS NOT NULL",
        "CREATE INDEX batches_by_job ON batches (job_id)",
        # Version 1's pacer_claim, without tokens, is no longer created: version 2 replaces it
        # (DROP FUNCTION IF EXISTS), and a database migrates to the last version at once.
    ),
    2: (
        "ALTER TABLE batches ADD COLUMN token bigint NOT NULL DEFAULT 0",
        "ALTER TABLE batches ADD COLUMN renewed_at timestamptz",
        "CREATE SEQUENCE batch_tokens",
        # Room in each page for a job's new row version: a commit's update of its progress,
        # which changes no indexed column, is then a HOT update that no index sees.
        "ALTER TABLE jobs SET (fillfactor = 50)",
        "DROP FUNCTION IF EXISTS pacer_claim(text, integer, double precision)",
        # A job's results counted per host: commits of one job from many hosts write
        # different rows, and meet on the job's row only after their flush.
        """CREATE TABLE job_progress (job_id text NOT NULL, host text NOT NULL,
    done integer NOT NULL, PRIMARY KEY (job_id, host))""",
        CLAIM_FUNCTION,
        COMMIT_PROCEDURE,
    ),
    3: (
        "CREATE TABLE workload_estimates (workload_key text PRIMARY KEY, estimates text NOT NULL)",
    ),
    # pacer_commit (replaced) and pacer_settle complete a job with pacer_complete, which
    # reads the view of the packs.
    4: (*PACK_SCHEMA, COMPLETE_FUNCTION, COMMIT_PROCEDURE, SETTLE_FUNCTION),
    # A result under a lease no longer held is counted as refused whatever its job's state.
    5: (COMMIT_PROCEDURE,),
    # pacer_commit finds the leases its results finish by key.
    6: (COMMIT_PROCEDURE,),
    # The restart grace covers any time the fleet could not reach the server (a failover).
    7: (*CLOCK_SCHEMA, CLAIM_FUNCTION),
    # No vacuum, autovacuum's included, cuts the queue table's empty pages off its end: the
    # churn fills them again at once, and the cut needs the table's exclusive lock.
    8: ("ALTER TABLE batches SET (vacuum_truncate = false)",),
    # The claim's scan for lapsed leases reads them by lease_until alone.
    9: (
        "DROP INDEX batches_by_lease",
        "CREATE INDEX batches_by_lease ON batches (lease_until)",
        CLAIM_FUNCTION,
    ),
    # Commits of one job no longer queue on its row to count its progress.
    10: (COMMIT_PROCEDURE,),
}


class NewerDatabaseSchemaError(JournalRefusedError):
    """The database was migrated by a newer pacer, to a schema this version cannot read."""

    def __init__(self, found: int) -> None:
        super().__init__(
            f"the PostgreSQL journal has schema version {found}; this pacer reads up to "
            f"version {SCHEMA_VERSION}: upgrade pacer on this host"
        )
        self.found = found


def schema_version(conn: psycopg.Connection[TupleRow]) -> int:
    """The database's schema version; 0 when pacer has never migrated it."""
    if conn.execute("SELECT to_regclass('pacer_schema')").fetchone() == (None,):
        return 0
    row = conn.execute("SELECT version FROM pacer_schema").fetchone()
    return 0 if row is None else int(row[0])


def migrate(conn: psycopg.Connection[TupleRow]) -> int:
    """Bring the database to `SCHEMA_VERSION` under the migration lock, in one transaction; the
    version found. `NewerDatabaseSchemaError` if a newer pacer migrated it."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS pacer_schema (one boolean PRIMARY KEY DEFAULT true"
            " CHECK (one), version integer NOT NULL)"
        )
        found = schema_version(conn)
        if found > SCHEMA_VERSION:
            raise NewerDatabaseSchemaError(found)
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute(
            "INSERT INTO pacer_schema (version) VALUES (%s)"
            " ON CONFLICT (one) DO UPDATE SET version = excluded.version",
            (SCHEMA_VERSION,),
        )
    return found
